package analyze

// Exported views of the classifier, so that kiln slim decides what a file is
// exactly the way kiln analyze reports it: one set of class rules, read by
// both.

// SniffLen is how many leading bytes SniffWeights needs.
const SniffLen = sniffLen

// ClassifyPath returns the class of a regular file from its root-relative
// path ("usr/bin/nvcc"). Weights are decided by content: a file for which
// WeightCandidate is true must be sniffed with SniffWeights.
func ClassifyPath(p string) Class { return classifyPath(p) }

// WeightCandidate reports whether a regular file of this path and size is
// worth sniffing for weights.
func WeightCandidate(p string, size int64) bool { return weightCandidate(p, size) }

// SniffWeights names the weights format of a file from its first SniffLen
// bytes ("safetensors", "gguf", ...), or returns "" when it holds none.
func SniffWeights(p string, head []byte, size int64) string { return sniffWeights(p, head, size) }

// Soname derives a shared library's SONAME from its file name
// (libcublas.so.11.11.3.6 → libcublas.so.11).
func Soname(base string) string { return soname(base) }

// IsCUDALibName reports whether a file name is one of the CUDA runtime
// libraries (the cuda_libs class), symlinks included.
func IsCUDALibName(base string) bool { return cudaLibRe.MatchString(base) }

// InCUDARoot reports whether p lies in a CUDA toolkit directory
// (/usr/local/cuda*, /usr/lib/nvidia-cuda-toolkit, ...).
func InCUDARoot(p string) bool { return cudaRootRe.MatchString(p) }
