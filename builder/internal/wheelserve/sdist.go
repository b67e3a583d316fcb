package wheelserve

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"sort"
	"strings"
	"time"
)

// SDist describes a stand-in source distribution: Files (paths relative to
// the project directory) packed as NAME-VERSION/... in a .tar.gz, with a
// PKG-INFO added.
type SDist struct {
	Name    string // distribution name, e.g. "flash_attn"
	Version string // e.g. "2.7.0.post2"
	Files   map[string][]byte
}

// Filename is the sdist's file name (NAME-VERSION.tar.gz).
func (s SDist) Filename() string {
	return fmt.Sprintf("%s-%s.tar.gz", strings.ReplaceAll(s.Name, "-", "_"), s.Version)
}

// Build returns the sdist's bytes; the same SDist gives the same bytes.
func (s SDist) Build() ([]byte, error) {
	top := fmt.Sprintf("%s-%s", strings.ReplaceAll(s.Name, "-", "_"), s.Version)
	files := map[string][]byte{
		"PKG-INFO": []byte(fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: kiln test stand-in (source)\n", strings.ReplaceAll(s.Name, "_", "-"), s.Version)),
	}
	for k, v := range s.Files {
		files[k] = v
	}
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	mod := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	dirs := map[string]bool{}
	addDir := func(d string) error {
		if dirs[d] {
			return nil
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mod, Format: tar.FormatPAX})
	}
	if err := addDir(top); err != nil {
		return nil, err
	}
	for _, n := range names {
		parts := strings.Split(n, "/")
		for i := 1; i < len(parts); i++ {
			if err := addDir(top + "/" + strings.Join(parts[:i], "/")); err != nil {
				return nil, err
			}
		}
		mode := int64(0o644)
		if strings.HasSuffix(n, ".py") && bytes.HasPrefix(files[n], []byte("#!")) {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: top + "/" + n, Mode: mode, Size: int64(len(files[n])), ModTime: mod, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// FlashAttnKernel is the mangled name of the stand-in's forward kernel; a
// test can look for it in the compiled cubins.
const FlashAttnKernel = "_Z26kiln_flash_fwd_softmax_rowPKfPfiif"

// FlashAttnSDist is a FlashAttention stand-in that must be compiled: its
// setup.py builds two real CUDA sources with nvcc into
// flash_attn/flash_attn_cuda*.so (a __global__ kernel each and extern "C"
// host wrappers, linked against the shared libcudart) and records how in
// flash_attn/build_info.py, for the archs in
// FLASH_ATTN_CUDA_ARCHS ("80;90" -> -gencode arch=compute_80,code=sm_80
// -gencode arch=compute_90,code=sm_90), MAX_JOBS nvcc processes at a time,
// NVCC_THREADS threads each. It needs only setuptools (pip wheel
// --no-build-isolation); flash_attn/__init__.py loads the library with ctypes
// (which needs libcudart.so.11.0, not a GPU).
func FlashAttnSDist(version string) SDist {
	return SDist{Name: "flash_attn", Version: version, Files: map[string][]byte{
		"setup.py":               []byte(strings.ReplaceAll(faSetupPy, "@VERSION@", version)),
		"csrc/flash_fwd.cu":      []byte(faFwdCu),
		"csrc/flash_bwd.cu":      []byte(faBwdCu),
		"flash_attn/__init__.py": []byte(strings.ReplaceAll(faInitPy, "@VERSION@", version)),
	}}
}

const faSetupPy = `# kiln test stand-in for FlashAttention's setup.py: compiles csrc/*.cu with
# nvcc into flash_attn/flash_attn_cuda*.so. Honours FLASH_ATTN_CUDA_ARCHS
# ("80;90"), MAX_JOBS (parallel nvcc processes), NVCC_THREADS, CUDA_HOME,
# CUDAHOSTCXX and LDFLAGS (-Wl,... flags). Needs only setuptools: build with --no-build-isolation.
import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

VERSION = "@VERSION@"


def find_nvcc():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    cands = [os.path.join(home, "bin", "nvcc")] if home else []
    cands += ["/usr/local/cuda/bin/nvcc", "/usr/lib/nvidia-cuda-toolkit/bin/nvcc"]
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    c = shutil.which("nvcc")
    if not c:
        raise SystemExit("flash_attn: nvcc not found (set CUDA_HOME)")
    return c


def host_compiler():
    cxx = os.environ.get("CUDAHOSTCXX")
    if cxx:
        return ["-ccbin", cxx]
    # Debian's toolkit ships a g++ wrapper that picks a g++ its nvcc supports.
    debian = "/usr/lib/nvidia-cuda-toolkit/bin/g++"
    if os.access(debian, os.X_OK):
        return ["-ccbin", debian]
    return []


def gencode():
    archs = os.environ.get("FLASH_ATTN_CUDA_ARCHS", "80;90")
    flags = []
    for a in re.split(r"[;,\s]+", archs.strip()):
        a = a.replace(".", "")
        if not a:
            continue
        if not re.fullmatch(r"[0-9]+[af]?", a):
            raise SystemExit("flash_attn: bad arch %r in FLASH_ATTN_CUDA_ARCHS=%r" % (a, archs))
        flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (a, a)]
    if not flags:
        raise SystemExit("flash_attn: FLASH_ATTN_CUDA_ARCHS is empty")
    return flags


def run(cmd):
    print(" ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.check_call(cmd)


class NvccBuildExt(build_ext):
    def build_extension(self, ext):
        out = self.get_ext_fullpath(ext.name)
        tmp = os.path.join(self.build_temp, "nvcc")
        os.makedirs(tmp, exist_ok=True)
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        nvcc = find_nvcc()
        ccbin = host_compiler()
        gen = gencode()
        jobs = max(1, int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1))
        threads = max(1, int(os.environ.get("NVCC_THREADS") or 2))
        print("flash_attn: nvcc %s, archs %s, MAX_JOBS=%d, NVCC_THREADS=%d" % (nvcc, os.environ.get("FLASH_ATTN_CUDA_ARCHS", "80;90"), jobs, threads), flush=True)

        def compile_one(src):
            obj = os.path.join(tmp, os.path.basename(src) + ".o")
            run([nvcc] + ccbin + ["-O3", "-std=c++14", "-Xcompiler", "-fPIC", "--threads", str(threads)] + gen + ["-c", src, "-o", obj])
            return obj

        with ThreadPoolExecutor(max_workers=jobs) as ex:
            objs = list(ex.map(compile_one, ext.sources))
        # LDFLAGS as setuptools honours it: -Wl,a,b reach the linker.
        ld = []
        for f in shlex.split(os.environ.get("LDFLAGS", "")):
            if f.startswith("-Wl,"):
                for a in f[4:].split(","):
                    ld += ["-Xlinker", a]
        run([nvcc] + ccbin + ["-shared", "-cudart", "shared"] + gen + objs + ld + ["-o", out])
        ver = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE, universal_newlines=True).stdout.strip().splitlines()
        with open(os.path.join(os.path.dirname(out), "build_info.py"), "w") as f:
            f.write("# written by setup.py when this wheel was built\n")
            f.write("NVCC = %r\nNVCC_VERSION = %r\n" % (nvcc, ver[-1] if ver else ""))
            f.write("FLASH_ATTN_CUDA_ARCHS = %r\nGENCODE = %r\n" % (os.environ.get("FLASH_ATTN_CUDA_ARCHS", "80;90"), " ".join(gen)))
            f.write("MAX_JOBS = %d\nNVCC_THREADS = %d\n" % (jobs, threads))


setup(
    name="flash_attn",
    version=VERSION,
    description="kiln test stand-in for FlashAttention (a CUDA kernel built from source)",
    packages=["flash_attn"],
    ext_modules=[Extension("flash_attn.flash_attn_cuda", sources=["csrc/flash_fwd.cu", "csrc/flash_bwd.cu"])],
    cmdclass={"build_ext": NvccBuildExt},
    python_requires=">=3.8",
    zip_safe=False,
)
`

const faFwdCu = `// kiln test stand-in for FlashAttention's forward pass: a row-wise scaled
// softmax, one thread per row.
#include <cuda_runtime.h>

__global__ void kiln_flash_fwd_softmax_row(const float *x, float *y, int rows, int cols, float scale) {
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= rows) return;
	const float *in = x + (size_t)r * cols;
	float *out = y + (size_t)r * cols;
	float m = -3.402823466e38f;
	for (int c = 0; c < cols; c++) m = fmaxf(m, in[c] * scale);
	float s = 0.f;
	for (int c = 0; c < cols; c++) {
		out[c] = __expf(in[c] * scale - m);
		s += out[c];
	}
	for (int c = 0; c < cols; c++) out[c] /= s;
}

extern "C" int kiln_flash_fwd(const float *x, float *y, int rows, int cols, float scale) {
	kiln_flash_fwd_softmax_row<<<(rows + 127) / 128, 128>>>(x, y, rows, cols, scale);
	return (int)cudaGetLastError();
}

// The CUDA runtime version the library was built against (11080 for 11.8).
extern "C" int kiln_cudart_build_version(void) { return CUDART_VERSION; }
`

const faBwdCu = `// kiln test stand-in for FlashAttention's backward pass: the softmax
// gradient dx = scale * y * (dy - sum(dy * y)), one thread per row.
#include <cuda_runtime.h>

__global__ void kiln_flash_bwd_softmax_row(const float *y, const float *dy, float *dx, int rows, int cols, float scale) {
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= rows) return;
	size_t o = (size_t)r * cols;
	float dot = 0.f;
	for (int c = 0; c < cols; c++) dot += dy[o + c] * y[o + c];
	for (int c = 0; c < cols; c++) dx[o + c] = scale * y[o + c] * (dy[o + c] - dot);
}

extern "C" int kiln_flash_bwd(const float *y, const float *dy, float *dx, int rows, int cols, float scale) {
	kiln_flash_bwd_softmax_row<<<(rows + 127) / 128, 128>>>(y, dy, dx, rows, cols, scale);
	return (int)cudaGetLastError();
}
`

const faInitPy = `"""kiln test stand-in for FlashAttention: CUDA kernels compiled from source
by nvcc when the wheel was built, loaded with ctypes (needs the libcudart it
was built against, which torch loads first, as FlashAttention imports torch;
no GPU is needed to load it, only to launch a kernel)."""
import ctypes as _ct
import glob as _glob
import os as _os

try:
    import torch as _torch  # noqa: F401  (loads libcudart from the nvidia wheels)
except ImportError:
    pass

__version__ = "@VERSION@"

_libs = sorted(_glob.glob(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "flash_attn_cuda*.so")))
if not _libs:
    raise ImportError("flash_attn: the compiled CUDA library is missing")
lib = _ct.CDLL(_libs[0])
_f, _i = _ct.c_void_p, _ct.c_int
lib.kiln_flash_fwd.argtypes = [_f, _f, _i, _i, _ct.c_float]
lib.kiln_flash_fwd.restype = _i
lib.kiln_flash_bwd.argtypes = [_f, _f, _f, _i, _i, _ct.c_float]
lib.kiln_flash_bwd.restype = _i
lib.kiln_cudart_build_version.restype = _i


def cudart_build_version():
    """The CUDA runtime version the library was built against (e.g. 11080)."""
    return lib.kiln_cudart_build_version()
`

// DemoExtName and DemoExtVersion are the source-only stand-in's project
// and release: an index serves its sdist and no wheel, so a recipe
// installs it only through pip_from_source.
const (
	DemoExtName    = "kiln-demo-ext"
	DemoExtVersion = "1.0"
)

// DemoExtSDist is a project that publishes only a source archive: a C
// extension (kiln_demo_ext._crc, a CRC-32 over bytes) built by
// setuptools with the devel image's C compiler, which a test imports and
// calls in the runtime image.
func DemoExtSDist() SDist {
	return SDist{Name: "kiln_demo_ext", Version: DemoExtVersion, Files: map[string][]byte{
		"setup.py":                  []byte(demoExtSetupPy),
		"kiln_demo_ext/__init__.py": []byte("from kiln_demo_ext._crc import crc32\n\n__version__ = \"" + DemoExtVersion + "\"\n"),
		"src/crc.c":                 []byte(demoExtC),
	}}
}

const demoExtSetupPy = `from setuptools import Extension, setup

setup(
    name="kiln-demo-ext",
    version="` + DemoExtVersion + `",
    packages=["kiln_demo_ext"],
    ext_modules=[Extension("kiln_demo_ext._crc", ["src/crc.c"])],
)
`

const demoExtC = `#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *crc32(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf))
        return NULL;
    unsigned long c = 0xffffffffUL;
    const unsigned char *p = buf.buf;
    for (Py_ssize_t i = 0; i < buf.len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320UL & (0UL - (c & 1)));
    }
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(c ^ 0xffffffffUL);
}

static PyMethodDef methods[] = {
    {"crc32", crc32, METH_VARARGS, "CRC-32 of a bytes-like object."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_crc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__crc(void) { return PyModule_Create(&module); }
`
