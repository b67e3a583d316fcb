// Package slim rewrites an existing image into a smaller one without a
// daemon and without a rebuild.
//
// Rewrite reads the image twice, as streams, several layers at a time. The
// first pass reads every tar header (and the few bytes that classify a file:
// weights are sniffed, small Python sources are scanned for run-time kernel
// compilers, CUDA libraries are hashed) and squashes the layers into the
// final filesystem the image presents: whiteouts, opaque directories,
// superseded copies and hardlinks are resolved exactly as a runtime would.
// A Policy then decides, per visible file, whether it is kept, dropped or
// diverted (model weights handed to a Diverter). The second pass streams the
// kept entries of each source layer into zstd-compressed tar segments on
// disk, one per output layer, and the segments are concatenated into the
// output blobs (zstd frames concatenate; tar segments without their end
// marker do too), so no layer is ever held in memory.
//
// Output layers are regrouped by how often their content changes: the OS
// first, then CUDA libraries, then Python packages, then the application,
// so a new application version only invalidates the last layer. Every byte
// that goes into a blob is deterministic (original mtimes, source order,
// fixed zstd settings with one encoder goroutine per segment), so the same
// input and policy give the same digest.
package slim
