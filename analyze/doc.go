// Package analyze reports what an image is made of: per-layer sizes, bytes
// superseded or deleted by later layers (waste), dive's efficiency score,
// and CUDA-aware classes of files that do not belong in a runtime image
// (compilers, headers, static libraries, caches, model weights, CUDA
// libraries shipped twice), each with the fix to suggest.
//
// Layers are read once, as streams, several at a time; only per-file
// metadata is kept, never file contents.
package analyze
