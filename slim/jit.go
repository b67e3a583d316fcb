package slim

import (
	"bytes"
	"io"
	"strings"
)

// jitHit records a file that shows a package compiles GPU kernels at run
// time, and so needs a compiler and headers in the image.
type jitHit struct {
	pkg   string // the Python package
	what  string // how it compiles
	needs string // what it needs from the image
}

// jitPackages are packages whose mere presence means run-time compilation.
var jitPackages = []struct {
	dir, what, needs string
}{
	{"triton", "Triton compiles kernels at run time (torch.compile, custom kernels)", "ptxas and the CUDA headers (its bundled ones under triton/backends/nvidia, or the toolkit's), Python headers and a C compiler"},
	{"flashinfer", "FlashInfer JIT-compiles attention kernels on first use", "nvcc and the CUDA headers (CUDA_HOME)"},
	{"deep_gemm", "DeepGEMM JIT-compiles its GEMM kernels at run time", "nvcc (or NVRTC) and the CUDA headers"},
}

// cppExtensionMarkers are the calls that build a torch extension at run
// time; BuildExtension/CUDAExtension in a setup.py are build-time only.
var cppExtensionMarkers = [][]byte{
	[]byte("cpp_extension.load("), []byte("cpp_extension.load_inline("),
	[]byte("cpp_extension import load"),
}

// maxScanPy bounds the Python sources read for cpp_extension calls.
const maxScanPy = 1 << 20

// pythonPackage returns the top-level package of a file under
// site-packages or dist-packages ("" if none).
func pythonPackage(p string) string {
	for _, marker := range []string{"site-packages/", "dist-packages/"} {
		if i := strings.Index(p, marker); i >= 0 {
			rest := p[i+len(marker):]
			if j := strings.IndexByte(rest, '/'); j > 0 {
				return rest[:j]
			}
		}
	}
	return ""
}

// detectJIT inspects one regular file. Only Python sources of packages other
// than torch itself are read (torch's own cpp_extension module is the
// library, not a user of it).
func detectJIT(p string, size int64, body io.Reader) (*jitHit, error) {
	pkg := pythonPackage(p)
	if pkg == "" {
		return nil, nil
	}
	for _, j := range jitPackages {
		if pkg == j.dir && strings.HasSuffix(p, "/__init__.py") && strings.Count(p[strings.Index(p, pkg):], "/") == 1 {
			return &jitHit{pkg: j.dir, what: j.what, needs: j.needs}, nil
		}
	}
	if pkg == "torch" || strings.HasPrefix(pkg, "torch-") || !strings.HasSuffix(p, ".py") || size > maxScanPy || strings.Contains(p, "/tests/") || strings.HasSuffix(p, "/setup.py") {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(body, maxScanPy))
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(b, []byte("cpp_extension")) {
		return nil, nil
	}
	for _, m := range cppExtensionMarkers {
		if bytes.Contains(b, m) {
			return &jitHit{pkg: pkg, what: "builds a torch C++/CUDA extension at run time (torch.utils.cpp_extension.load in /" + p + ")", needs: "nvcc, the CUDA headers and torch's headers"}, nil
		}
	}
	return nil, nil
}
