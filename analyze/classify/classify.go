// Package classify decides what a file in an image is (a build tool, a
// header, a static library, docs, a cache, model weights, a CUDA runtime
// library, or other) from its path and, for weights, its first bytes. kiln
// analyze reports with it and kiln slim rewrites with it, so what slim
// removes is exactly what analyze called removable: one set of class rules,
// read by both.
//
// Invariants:
//   - Classification reads only what a layer stream has when the file's
//     header passes: the root-relative path, the size and the first
//     SniffLen bytes. Nothing needs the end of a file (Soname works from the
//     name for that reason), so one streaming pass decides every class.
//   - Weights are decided by content, never by name alone: a file is a
//     WeightCandidate by name and size, and weights only when SniffWeights'
//     framing checks hold, so a renamed model is found and a renamed text
//     file is not taken for one.
//   - Class values are stable: they appear in kiln analyze --json and in
//     --ci rule files.
package classify

import (
	"bytes"
	"encoding/binary"
	"path"
	"regexp"
	"strings"
)

// Class is a kind of file kiln reports on. Values are stable: they appear in
// --json output and in --ci rule files.
type Class string

// The classes. A file has at most one; the rest are "other".
const (
	ClassDevTools   Class = "dev_tools"   // nvcc and the CUDA toolkit's compilers and profilers
	ClassHeaders    Class = "headers"     // C/C++/CUDA headers
	ClassStaticLibs Class = "static_libs" // *.a archives
	ClassDocs       Class = "docs"        // docs, man pages, samples
	ClassCaches     Class = "caches"      // pip, uv, conda, apt, __pycache__
	ClassWeights    Class = "weights"     // model weights, detected by content
	ClassCUDALibs   Class = "cuda_libs"   // CUDA runtime libraries (needed; reported for duplicates)
	ClassOther      Class = ""
)

// AllClasses lists the reported classes in display order.
var AllClasses = []Class{ClassDevTools, ClassHeaders, ClassStaticLibs, ClassDocs, ClassCaches, ClassWeights, ClassCUDALibs}

// DevOnly reports whether the class has no place in a runtime image.
func (c Class) DevOnly() bool {
	return c == ClassDevTools || c == ClassHeaders || c == ClassStaticLibs || c == ClassDocs
}

// Fix is the remedy kiln suggests for a class.
func (c Class) Fix() string {
	switch c {
	case ClassDevTools:
		return "compile in a -devel stage and copy only the results onto a -runtime base (kiln build does this); nvcc is never needed at run time"
	case ClassHeaders:
		return "headers are build inputs: keep them in the -devel stage of a multi-stage build"
	case ClassStaticLibs:
		return "static libraries are linked at build time only: keep them in the -devel stage"
	case ClassDocs:
		return "drop docs and samples: apt-get install --no-install-recommends plus a dpkg path-exclude for /usr/share/doc and /usr/share/man, or delete them in the same RUN step"
	case ClassCaches:
		return "caches never belong in layers: pip install --no-cache-dir (or a BuildKit cache mount), and rm -rf /var/lib/apt/lists/* in the same RUN as apt-get; a later layer cannot shrink an earlier one"
	case ClassWeights:
		return "move weights out of the image: kiln weights turns them into a volume manifest and content-addressed blobs mounted at run time"
	case ClassCUDALibs:
		return "ship each CUDA library once: when the torch wheels bring nvidia-* libraries, build on the -base image instead of -runtime"
	}
	return ""
}

// toolkitBinaries are the CUDA toolkit's build-time executables, wherever a
// distribution puts them.
var toolkitBinaries = map[string]bool{
	"nvcc": true, "nvcc.profile": true, "cicc": true, "ptxas": true, "nvlink": true, "fatbinary": true,
	"cudafe++": true, "cuobjdump": true, "nvdisasm": true, "nvprune": true, "cu++filt": true,
	"bin2c": true, "crt": false, "nvprof": true, "ncu": true, "nsys": true, "compute-sanitizer": true,
	"cuda-gdb": true, "cuda-gdbserver": true, "nvvp": true, "nsight-sys": true, "nsight-compute": true,
	"ptx-lint": false,
}

// cudaRoots are directories that hold a CUDA toolkit: NVIDIA's layout and
// Debian's.
var cudaRootRe = regexp.MustCompile(`^(usr/local/cuda[^/]*|opt/nvidia/[^/]+|usr/lib/nvidia-cuda-toolkit|usr/lib/cuda)/`)

var cudaLibRe = regexp.MustCompile(`^lib(cudart|cublas|cublasLt|cufft|cufftw|curand|cusparse|cusolver|cusolverMg|nvrtc|nvrtc-builtins|cudnn[a-z_]*|nccl|nvJitLink|npp[a-z]*|nvjpeg|cupti|nvToolsExt|cufile|nvperf_host|nvperf_target|cusparseLt)\.so(\.[0-9.]+)?$`)

var headerExt = map[string]bool{".h": true, ".hpp": true, ".hh": true, ".hxx": true, ".cuh": true, ".inl": true, ".tcc": true}

var weightExt = map[string]bool{".safetensors": true, ".gguf": true, ".pt": true, ".pth": true, ".bin": true, ".ckpt": true, ".onnx": true}

// ClassifyPath returns the class of a regular file from its root-relative
// path ("usr/bin/nvcc") alone. Weights are decided by content, so this
// returns ClassOther for them: a file for which WeightCandidate is true must
// be sniffed with SniffWeights.
func ClassifyPath(p string) Class {
	base := path.Base(p)
	ext := path.Ext(base)
	dir := path.Dir(p)
	switch {
	case strings.HasPrefix(p, "var/lib/apt/lists/") || strings.HasPrefix(p, "var/cache/apt/"),
		strings.Contains("/"+p, "/.cache/pip/"), strings.Contains("/"+p, "/.cache/uv/"),
		strings.Contains("/"+p, "/.cache/huggingface/xet/"),
		strings.HasPrefix(p, "opt/conda/pkgs/"), strings.Contains("/"+p, "/.conda/pkgs/"),
		strings.Contains("/"+p, "/__pycache__/"):
		if base == "lock" || base == "partial" {
			return ClassOther
		}
		return ClassCaches
	case ext == ".a":
		return ClassStaticLibs
	case strings.HasPrefix(p, "usr/share/doc/") || strings.HasPrefix(p, "usr/share/man/") || strings.HasPrefix(p, "usr/share/info/"),
		cudaRootRe.MatchString(p) && (strings.Contains(p, "/doc/") || strings.Contains(p, "/samples/") || strings.Contains(p, "/extras/demo_suite/")),
		strings.Contains(p, "/cuda-samples/"):
		return ClassDocs
	case headerExt[ext] && (strings.Contains("/"+dir+"/", "/include/") || cudaRootRe.MatchString(p)),
		// The system include directories hold nothing but headers, and
		// C++'s have no extension (<vector>, <cuda/std/utility>).
		strings.HasPrefix(p, "usr/include/") || strings.HasPrefix(p, "usr/local/include/"):
		return ClassHeaders
	case isToolkitBinary(p, base):
		return ClassDevTools
	case cudaLibRe.MatchString(base) && (strings.HasPrefix(p, "usr/") || strings.HasPrefix(p, "opt/") || strings.Contains(p, "site-packages/") || strings.Contains(p, "dist-packages/")):
		return ClassCUDALibs
	}
	return ClassOther
}

// gccInternals are gcc's own compiler passes, which the gcc driver runs:
// a compiler is a build tool, like nvcc.
var gccInternals = map[string]bool{
	"cc1": true, "cc1plus": true, "cc1obj": true, "cc1objplus": true, "cc1gm2": true, "f951": true, "d21": true, "go1": true,
	"gnat1": true, "lto1": true, "collect2": true, "lto-wrapper": true, "g++-mapper-server": true,
}

// gccLibexecRe is where gcc keeps them: /usr/lib/gcc/TRIPLET/VERSION/
// (Debian) or /usr/libexec/gcc/TRIPLET/VERSION/ (Fedora, upstream).
var gccLibexecRe = regexp.MustCompile(`^usr/(lib|libexec|local/libexec|local/lib)/gcc/[^/]+/[^/]+/[^/]+$`)

// ltoDumpRe is gcc's lto-dump (x86_64-linux-gnu-lto-dump-13), a tool for
// inspecting LTO object files: 28 MB that no program runs.
var ltoDumpRe = regexp.MustCompile(`^([a-z0-9_]+-linux-gnu-)?lto-dump(-[0-9.]+)?$`)

func isToolkitBinary(p, base string) bool {
	if gccInternals[base] && gccLibexecRe.MatchString(p) {
		return true
	}
	if ltoDumpRe.MatchString(base) && strings.HasPrefix(p, "usr/bin/") {
		return true
	}
	if !toolkitBinaries[base] {
		// The NVVM compiler back end, the toolkit's Nsight tools and
		// compute-sanitizer's support files are build/profiling only.
		return cudaRootRe.MatchString(p) && (strings.Contains(p, "/nvvm/") || strings.Contains(p, "/nsight") || strings.Contains(p, "/libnvvp/") || strings.Contains(p, "/compute-sanitizer/"))
	}
	return strings.HasPrefix(p, "usr/bin/") || strings.HasPrefix(p, "usr/local/bin/") || cudaRootRe.MatchString(p) ||
		strings.Contains(p, "site-packages/nvidia/") || strings.Contains(p, "/bin/")
}

// SniffLen is how many leading bytes of a candidate file SniffWeights needs
// to decide whether it holds weights.
const SniffLen = 64

// WeightCandidate reports whether a regular file of this name and size is worth
// sniffing: any file with a weights extension, and extension-less or
// unknown-extension files of any size from 1 KiB (weights are often
// renamed, and small quantised models are a few MiB). The first bytes of
// every file pass through the layer stream anyway; what keeps a renamed
// file from being taken for weights is SniffWeights' strict framing checks.
func WeightCandidate(p string, size int64) bool {
	if size < 1024 {
		return false
	}
	if weightExt[path.Ext(p)] {
		return true
	}
	return ClassifyPath(p) == ClassOther && !strings.Contains(path.Base(p), ".so")
}

// SniffWeights names the weights format of a file from its first SniffLen
// bytes ("safetensors", "gguf", "torch-zip", "pickle", "onnx"), or returns
// "" when the content is not a weights container.
func SniffWeights(p string, head []byte, size int64) string {
	switch {
	case len(head) >= 10 && isSafetensorsHeader(head, size):
		return "safetensors"
	case bytes.HasPrefix(head, []byte("GGUF")) && (weightExt[path.Ext(p)] || isGGUFVersion(head)):
		return "gguf"
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		// torch.save's zip container (.pt/.pth/.bin/.ckpt). Any zip with a
		// weights extension counts; a random .zip does not.
		if weightExt[path.Ext(p)] {
			return "torch-zip"
		}
	case len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5:
		// A pickle stream (legacy torch.save) starts with PROTO n.
		if weightExt[path.Ext(p)] {
			return "pickle"
		}
	case path.Ext(p) == ".onnx" && len(head) > 0 && head[0] == 0x08:
		// ONNX ModelProto begins with field 1 (ir_version, varint): 0x08.
		return "onnx"
	}
	return ""
}

// isGGUFVersion checks the little-endian u32 version after the GGUF magic
// (3 today): a text file that happens to begin with "GGUF" has letters there.
func isGGUFVersion(head []byte) bool {
	if len(head) < 8 {
		return false
	}
	v := binary.LittleEndian.Uint32(head[4:8])
	return v >= 1 && v <= 255
}

// isSafetensorsHeader checks the safetensors framing: a little-endian u64
// header length that fits in the file, followed by a JSON object.
func isSafetensorsHeader(head []byte, size int64) bool {
	n := binary.LittleEndian.Uint64(head[:8])
	if n < 2 || n > 100<<20 || int64(n)+8 > size {
		return false
	}
	return head[8] == '{'
}

// Soname derives a shared library's SONAME from its file name
// (libcublas.so.11.11.3.6 → libcublas.so.11). Reading DT_SONAME would need
// the end of the file, which a stream has not reached yet; NVIDIA's and
// Debian's packages name files after their SONAME.
func Soname(base string) string {
	i := strings.Index(base, ".so")
	if i < 0 {
		return base
	}
	rest := base[i+3:]
	if rest == "" {
		return base
	}
	parts := strings.SplitN(strings.TrimPrefix(rest, "."), ".", 2)
	return base[:i+3] + "." + parts[0]
}

// IsCUDALibName reports whether a file name is one of the CUDA runtime
// libraries (the cuda_libs class), symlinks included.
func IsCUDALibName(base string) bool { return cudaLibRe.MatchString(base) }

// InCUDARoot reports whether p lies in a CUDA toolkit directory
// (/usr/local/cuda*, /usr/lib/nvidia-cuda-toolkit, ...).
func InCUDARoot(p string) bool { return cudaRootRe.MatchString(p) }
