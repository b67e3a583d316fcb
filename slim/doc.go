// Package slim rewrites an existing image into a smaller one without a
// daemon and without a rebuild.
//
// Rewrite reads the image twice, as streams, several layers at a time. The
// first pass reads every tar header (and the few bytes that classify a file:
// weights are sniffed, small Python sources are scanned for run-time kernel
// compilers, CUDA libraries are hashed) and squashes the layers into the
// final filesystem the image presents: whiteouts, opaque directories,
// superseded copies and hardlinks are resolved exactly as a runtime would
// (layers/overlay).
// A Policy then decides, per visible file, whether it is kept, dropped or
// diverted (model weights handed to a Diverter). The second pass streams the
// kept entries of each source layer into zstd-compressed tar segments on
// disk, one per output layer, and the segments are concatenated into the
// output blobs (zstd frames concatenate; tar segments without their end
// marker do too), so no layer is ever held in memory. That stream is the
// zstd blob; decoded once, it gives the diff ID and, when gzip is asked
// for, feeds a gzip encoder writing the gzip blob of the same tar in the
// same pass (Options.Compression: either or both; Result.ImageFor picks).
//
// Output layers are regrouped by how often their content changes: the OS
// first, then CUDA libraries, then Python packages, then the application,
// so a new application version only invalidates the last layer. A group
// larger than Options.MaxLayerSize is split into consecutive layers by
// files, packed in path order (splitGroups): the split of a group depends
// only on that group's files, so the application still invalidates only
// its own layer, and pulls fetch and unpack several moderate layers instead
// of waiting on one big one. Directories land in the lowest layer of what
// they hold and hardlinks in their target's, as without a split.
//
// AddEStargz adds a third encoding after the rewrite, for lazy pulls by the
// stargz snapshotter (layers.WriteEStargz): each layer's first blob is
// decoded twice, the startup set (the files ProbeRecord saw the probe open,
// recorded with fanotify on the probe container's root mount) written
// first, then the prefetch landmark, then the rest. Its tars are not the
// other encodings' (the library rewrites headers and appends its table of
// contents), so it has its own diff IDs and image ID; its descriptors carry
// the TOC digest the snapshotter verifies. It depends only on the layer's
// tar and the set of startup paths, not on their order.
//
// Publish is what follows a rewrite: each encoding's image (with the
// weights volume's labels), an optional probe run through BuildKit before
// anything is written (recording the eStargz startup set), then the
// writes, SBOM attestations and signatures through layers/publish.
//
// Every byte that goes into a blob is deterministic (original mtimes,
// source order, path-ordered splits, fixed zstd settings with one encoder
// goroutine per segment, gzip at GzipLevel with an empty header and one
// goroutine), so the same input and policy give the same digests.
package slim
