// Package layers reads container images and their layers as streams: one
// reference syntax for registries, OCI layouts and docker archives, digest
// verification on every blob, decompression (gzip, zstd, none) and a tar
// walker that survives hostile archives.
//
// One walk leads from a reference to an image's verified metadata:
// Resolve reads the root a reference names, and Walk goes below it (an
// index's manifests for the platform, by one platform rule; nested indexes;
// the manifest a Chooser picks, the first by default; its config), each
// read verified against its descriptor's digest and size. Open, kiln
// warm's set (whose Chooser takes a platform's zstd manifest when the host
// can run it) and the weights sources all walk through it.
//
// Nothing here holds a layer in memory: every blob is an io.Reader pipeline,
// and uncompressed layers in local files are read through io.SectionReader so
// that callers can seek past file contents they do not need.
//
// Write stores an image in any of those places. A docker archive always
// gets plain tar layers checked against the config's diff IDs as they
// stream, whatever the image's blobs are: an archive exists to be loaded,
// and docker load before Docker 23.0 reads no zstd.
//
// The squash of layers into the filesystem a container sees (whiteouts,
// opaque directories, symlinks) is the sub-package layers/overlay, one tree
// for kiln analyze and kiln slim.
//
// Blob transfer (sources by digest, the resumable verified ingest, the one
// copy loop, rate limiting) is the sub-package layers/blob; the registry
// client under both (auth, transport, retries, redaction, verified reads)
// is the package registry, whose names layers keeps as aliases until its
// callers have moved: warm and weights move every blob through them.
//
// Scratch is the one writer of the blobs kiln makes itself, whose digest
// is known only at their last byte (slim's and convert's layers, eStargz
// blobs, weights' files): hashed as written, named by digest on Commit.
//
// WriteEStargz is the one eStargz writer (kiln slim --format estargz, kiln
// convert --format estargz): it reads its source twice as a stream (the
// startup files first, then the rest) and writes through the
// stargz-snapshotter's estargz library at a fixed gzip level, so the same
// tar and the same startup set give the same blob. Decompress reads every
// gzip member of a blob, as runtimes do: an eStargz layer is many.
package layers
