package slim

import (
	"archive/tar"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/testimage"
)

// elfObjects compiles the test's real ELF objects with gcc, once per test
// binary run: an executable, libraries linking each other by SONAME and
// through RUNPATH $ORIGIN, a Python extension module.
type elfObjects map[string][]byte

var builtELF elfObjects

func buildELF(t *testing.T) elfObjects {
	t.Helper()
	if builtELF != nil {
		return builtELF
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	dir := t.TempDir()
	src := func(name, body string) string {
		f := filepath.Join(dir, name+".c")
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	gcc := func(args ...string) {
		t.Helper()
		out, err := exec.Command("gcc", append([]string{"-O0", "-fPIC"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	// lib NAME with SONAME so, needing deps (files in dir), extra flags.
	lib := func(file, so, body string, extra ...string) {
		args := []string{"-shared", "-o", filepath.Join(dir, file), src(file, body), "-Wl,-soname," + so}
		gcc(append(args, extra...)...)
	}
	lib("libdeep.so.1", "libdeep.so.1", `int deep(void){return 40;}`)
	lib("libdeepA.so.1", "libdeep.so.1", `int deep(void){return -1000;}`) // the copy the loader must not pick
	lib("libmid.so.1.2", "libmid.so.1", `int deep(void); int mid(void){return deep()+2;}`,
		filepath.Join(dir, "libdeep.so.1"), "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/..")
	gcc("-o", filepath.Join(dir, "app"), src("app", `#include <stdio.h>
int mid(void); int main(void){printf("answer %d\n", mid()); return 0;}`), filepath.Join(dir, "libmid.so.1.2"), "-Wl,-rpath-link,"+dir)
	lib("libonlyunused.so.1", "libonlyunused.so.1", `int ou(void){return 1;}`)
	lib("libunused.so.1.0", "libunused.so.1", `int ou(void); int unused(void){return ou();}`, filepath.Join(dir, "libonlyunused.so.1"))
	lib("libnvrtcdep.so.1", "libnvrtcdep.so.1", `int nd(void){return 3;}`)
	lib("libnvrtc.so.11.2", "libnvrtc.so.11.2", `int nd(void); int nvrtc(void){return nd();}`, filepath.Join(dir, "libnvrtcdep.so.1"))
	lib("libpyonly.so.1", "libpyonly.so.1", `int py(void){return 4;}`)
	lib("_ext.so", "_ext.so", `int py(void); int PyInit__ext(void){return py();}`, filepath.Join(dir, "libpyonly.so.1"))
	lib("libllvmish.so.1", "libllvmish.so.1", `int llvm(void){return 5;}`)
	lib("fake_dri.so", "fake_dri.so", `int llvm(void); int dri(void){return llvm();}`, filepath.Join(dir, "libllvmish.so.1"))
	lib("libplugdep.so.1", "libplugdep.so.1", `int pd(void){return 6;}`)
	lib("plug.so", "plug.so", `int pd(void); int plug(void){return pd();}`, filepath.Join(dir, "libplugdep.so.1"))
	lib("libkeepme.so.3", "libkeepme.so.3", `int keep(void){return 7;}`)
	lib("libcublas.so.11", "libcublas.so.11", `int cublas(void){return 8;}`)
	objs := elfObjects{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".c") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		objs[e.Name()] = b
	}
	builtELF = objs
	return objs
}

const ml = "usr/lib/x86_64-linux-gnu/"

// pruneImage is a small image of real ELF objects (see buildELF); extra
// entries are appended to the last layer.
func pruneImage(t *testing.T, o elfObjects, extra ...testimage.Entry) []testimage.Entry {
	return append([]testimage.Entry{
		testimage.File("etc/ld.so.conf", []byte("include /etc/ld.so.conf.d/*.conf\n")),
		testimage.File("etc/ld.so.conf.d/x86_64-linux-gnu.conf", []byte("# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")),
		testimage.File("usr/bin/app", o["app"]),
		testimage.File("usr/bin/script", []byte("#!/bin/sh\necho not an ELF file, and long enough to be peeked at\n")),
		// The chain of names of a kept library.
		testimage.File(ml+"libmid.so.1.2", o["libmid.so.1.2"]),
		testimage.Symlink(ml+"libmid.so.1", "libmid.so.1.2"),
		testimage.Symlink(ml+"libmid.so", "libmid.so.1"),
		// libmid's RUNPATH $ORIGIN/.. finds /usr/lib/libdeep.so.1 before
		// the search directories' copy.
		testimage.File("usr/lib/libdeep.so.1", o["libdeep.so.1"]),
		testimage.File(ml+"libdeep.so.1", o["libdeepA.so.1"]),
		// A chain nothing links, and what only it needs.
		testimage.File(ml+"libunused.so.1.0", o["libunused.so.1.0"]),
		testimage.Symlink(ml+"libunused.so.1", "libunused.so.1.0"),
		testimage.Symlink(ml+"libunused.so", "libunused.so.1"),
		testimage.File(ml+"libonlyunused.so.1", o["libonlyunused.so.1"]),
		// dlopen'ed by name (keep-list), with what it needs.
		testimage.File(ml+"libnvrtc.so.11.2", o["libnvrtc.so.11.2"]),
		testimage.File(ml+"libnvrtcdep.so.1", o["libnvrtcdep.so.1"]),
		// A Python extension module and the library only it needs.
		testimage.File("usr/lib/python3/dist-packages/ext/_ext.cpython-311-x86_64-linux-gnu.so", o["_ext.so"]),
		testimage.File(ml+"libpyonly.so.1", o["libpyonly.so.1"]),
		// Opened by path through a link from a Python package (torch's
		// libtorch_global_deps.so): a root.
		testimage.Symlink("usr/lib/python3/dist-packages/ext/lib/libglobal_deps.so", "../../../../x86_64-linux-gnu/libglobal_deps.so.1"),
		testimage.File(ml+"libglobal_deps.so.1", o["libllvmish.so.1"]),
		// A plugin directory whose owner (libGLX_mesa) is absent.
		testimage.File(ml+"dri/fake_dri.so", o["fake_dri.so"]),
		testimage.File(ml+"libllvmish.so.1", o["libllvmish.so.1"]),
		// An unknown plugin directory: never pruned, a root.
		testimage.File(ml+"someplugin/plug.so", o["plug.so"]),
		testimage.File(ml+"libplugdep.so.1", o["libplugdep.so.1"]),
		testimage.File(ml+"libkeepme.so.3", o["libkeepme.so.3"]),
		testimage.File(ml+"libcublas.so.11", o["libcublas.so.11"]),
		// A link-time stub: never loaded, and its name must not make
		// libcublas look kept.
		testimage.File(ml+"stubs/libcublas.so", o["libcublas.so.11"]),
		testimage.File(ml+"libnotelf.so.1", []byte("not an ELF object, whatever its name says; kept")),
	}, extra...)
}

func strictPolicy(t *testing.T) *Policy {
	p, err := BuiltinPolicy("runtime-strict")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The closure keeps exactly what the loader would load from the roots, and
// the keep-lists; name chains go as a unit; the report adds up; and the
// kept program still runs with the real loader in the slim tree.
func TestPruneClosure(t *testing.T) {
	o := buildELF(t)
	pol := strictPolicy(t)
	pol.KeepLibs = []string{"libkeepme.so*"}
	fs, res, _ := slimFS(t, pol, testimage.Config{Cmd: []string{"app"}, Env: []string{"PATH=/usr/bin"}}, pruneImage(t, o))

	kept := []string{"usr/bin/app", "usr/bin/script", ml + "libmid.so.1.2", ml + "libmid.so.1", ml + "libmid.so", "usr/lib/libdeep.so.1",
		ml + "libnvrtc.so.11.2", ml + "libnvrtcdep.so.1", "usr/lib/python3/dist-packages/ext/_ext.cpython-311-x86_64-linux-gnu.so",
		ml + "libpyonly.so.1", ml + "libglobal_deps.so.1", "usr/lib/python3/dist-packages/ext/lib/libglobal_deps.so", ml + "someplugin/plug.so", ml + "libplugdep.so.1", ml + "libkeepme.so.3", ml + "libnotelf.so.1",
		"etc/ld.so.conf", "etc/ld.so.conf.d/x86_64-linux-gnu.conf"}
	dropped := []string{ml + "libdeep.so.1", ml + "libunused.so.1.0", ml + "libunused.so.1", ml + "libunused.so", ml + "libonlyunused.so.1",
		ml + "dri/fake_dri.so", ml + "libllvmish.so.1", ml + "libcublas.so.11", ml + "stubs/libcublas.so"}
	for _, p := range kept {
		if _, ok := fs[p]; !ok {
			t.Errorf("%s dropped", p)
		}
	}
	for _, p := range dropped {
		if _, ok := fs[p]; ok {
			t.Errorf("%s kept", p)
		}
	}

	pr := res.Report.Prune
	if pr == nil {
		t.Fatal("no prune report")
	}
	var wantBytes int64
	for _, n := range []string{"libdeepA.so.1", "libunused.so.1.0", "libonlyunused.so.1", "fake_dri.so", "libllvmish.so.1", "libcublas.so.11", "libcublas.so.11"} {
		wantBytes += int64(len(o[n]))
	}
	if pr.DroppedFiles != 7 || pr.DroppedBytes != wantBytes {
		t.Errorf("prune dropped %d files %d bytes, want 7 files %d bytes", pr.DroppedFiles, pr.DroppedBytes, wantBytes)
	}
	var sum *RemovedSum
	for i := range res.Report.Removed {
		if res.Report.Removed[i].Why == whyUnreferenced {
			sum = &res.Report.Removed[i]
		}
	}
	if sum == nil || sum.Bytes != wantBytes {
		t.Errorf("removed[unreferenced_libs] = %+v, want %d bytes", sum, wantBytes)
	}
	why := map[string]string{}
	for _, f := range pr.Top {
		why[f.Path] = f.Why
	}
	if w := why["/"+ml+"libonlyunused.so.1"]; !strings.Contains(w, "needed only by unreferenced libunused.so.1.0") {
		t.Errorf("why libonlyunused: %q", w)
	}
	if w := why["/"+ml+"libunused.so.1.0"]; !strings.HasPrefix(w, "no referrer") {
		t.Errorf("why libunused: %q", w)
	}
	var reasons []string
	for _, k := range pr.KeptByList {
		reasons = append(reasons, k.Path+": "+k.Reason)
	}
	if r := strings.Join(reasons, "\n"); !strings.Contains(r, "libnvrtc.so.11.2: NVRTC") || !strings.Contains(r, "libkeepme.so.3: keep_libs libkeepme.so*") {
		t.Errorf("kept by list:\n%s", r)
	}
	if len(pr.SearchDirs) < 2 || pr.SearchDirs[0] != "/usr/lib/x86_64-linux-gnu" {
		t.Errorf("search dirs %v: ld.so.conf first", pr.SearchDirs)
	}
	var table strings.Builder
	res.Report.WriteTable(&table)
	if !strings.Contains(table.String(), "unreferenced libraries") || !strings.Contains(table.String(), "libunused.so.1.0") {
		t.Errorf("table:\n%s", table.String())
	}

	// The real loader runs the kept program in the slim tree (libc is
	// the host's: the image has none), and gets libdeep through RUNPATH.
	root := extract(t, fs)
	ld := "/lib64/ld-linux-x86-64.so.2"
	if _, err := os.Stat(ld); err != nil {
		t.Skip(err)
	}
	out, err := exec.Command(ld, "--inhibit-cache", "--library-path", filepath.Join(root, ml)+":/lib/x86_64-linux-gnu", filepath.Join(root, "usr/bin/app")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "answer 42" {
		t.Errorf("the slim tree's app: %v: %s", err, out)
	}
}

// extract writes a flattened filesystem to a directory.
func extract(t *testing.T, fs map[string]fsEntry) string {
	t.Helper()
	root := t.TempDir()
	for p, e := range fs {
		dst := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		switch e.typ {
		case tar.TypeDir:
			os.MkdirAll(dst, 0o755)
		case tar.TypeSymlink:
			if err := os.Symlink(e.link, dst); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.WriteFile(dst, []byte(e.body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// Prune is off unless asked for; a GL owner keeps its plugin directory;
// run-time kernel compilers keep the CUDA libraries.
func TestPruneSwitches(t *testing.T) {
	o := buildELF(t)
	sp := "usr/local/lib/python3.11/dist-packages/"
	cases := []struct {
		name  string
		pol   *Policy
		extra []testimage.Entry
		kept  []string
		gone  []string
	}{
		{"runtime keeps every library", runtimePolicy(t), nil, []string{ml + "libunused.so.1.0", ml + "libcublas.so.11", ml + "dri/fake_dri.so"}, nil},
		{"plugin dir of a kept owner", strictPolicy(t), []testimage.Entry{
			// libGLX_mesa is kept (here by keep_libs): dri/ is in use, and
			// what its drivers need too.
			testimage.File(ml+"libGLX_mesa.so.0", o["libkeepme.so.3"]),
		}, []string{ml + "dri/fake_dri.so", ml + "libllvmish.so.1"}, []string{ml + "libunused.so.1.0"}},
		{"libcublas kept keeps libcublasLt", strictPolicy(t), []testimage.Entry{
			testimage.File(ml+"libcublasLt.so.11", o["libkeepme.so.3"]),
			testimage.File("usr/lib/python3/dist-packages/blas/_blas.so", o["fake_dri.so"]),
		}, []string{ml + "libcublasLt.so.11", ml + "libcublas.so.11"}, []string{ml + "libunused.so.1.0"}},
		{"app directory objects are roots", strictPolicy(t), []testimage.Entry{
			testimage.File("srv/app/bin/viewer.so", o["fake_dri.so"]),
		}, []string{ml + "libllvmish.so.1"}, []string{ml + "dri/fake_dri.so", ml + "libunused.so.1.0"}},
		{"a ROCm module of a kept UCX goes from a CUDA image", strictPolicy(t), []testimage.Entry{
			testimage.File(ml+"libucs.so.0", o["libkeepme.so.3"]),
			testimage.File(ml+"libcudart.so.12", o["libkeepme.so.3"]),
			testimage.File(ml+"ucx/libuct_ib.so.0", o["fake_dri.so"]),
			testimage.File(ml+"ucx/libuct_rocm.so.0", o["plug.so"]),
		}, []string{ml + "ucx/libuct_ib.so.0", ml + "libllvmish.so.1"}, []string{ml + "ucx/libuct_rocm.so.0", ml + "libunused.so.1.0"}},
		{"a ROCm module of a kept UCX stays without CUDA", strictPolicy(t), []testimage.Entry{
			testimage.File(ml+"libucs.so.0", o["libkeepme.so.3"]),
			testimage.File(ml+"ucx/libuct_rocm.so.0", o["plug.so"]),
		}, []string{ml + "ucx/libuct_rocm.so.0"}, []string{ml + "libunused.so.1.0"}},
		{"UCX modules go with UCX", strictPolicy(t), []testimage.Entry{
			testimage.File(ml+"ucx/libuct_ib.so.0", o["fake_dri.so"]),
		}, nil, []string{ml + "ucx/libuct_ib.so.0", ml + "libunused.so.1.0"}},
		{"gcc's link-time names root nothing without a compiler", strictPolicy(t), []testimage.Entry{
			testimage.Symlink("usr/lib/gcc/x86_64-linux-gnu/13/libkeepme.so", "../../../x86_64-linux-gnu/libkeepme.so.3"),
			testimage.File("usr/lib/python3/dist-packages/torch/bin/test_api", o["app"]),
			testimage.File("usr/lib/python3/dist-packages/torch/bin/torch_shm_manager", o["app"]),
			testimage.File("usr/lib/libtorch-cuda-test/cuda_cub_test", o["app"]),
			testimage.File("usr/share/locale/de/LC_MESSAGES/apt.mo", []byte("Katalog")),
			testimage.File("usr/share/locale/locale.alias", []byte("german de_DE.ISO-8859-1\n")),
		}, []string{"usr/lib/python3/dist-packages/torch/bin/torch_shm_manager", "usr/share/locale/locale.alias"}, []string{"usr/share/locale/de/LC_MESSAGES/apt.mo", ml + "libkeepme.so.3", "usr/lib/gcc/x86_64-linux-gnu/13/libkeepme.so", "usr/lib/python3/dist-packages/torch/bin/test_api", "usr/lib/libtorch-cuda-test/cuda_cub_test"}},
		{"gcc's link-time names root their libraries beside a run-time compiler", strictPolicy(t), []testimage.Entry{
			testimage.Symlink("usr/lib/gcc/x86_64-linux-gnu/13/libkeepme.so", "../../../x86_64-linux-gnu/libkeepme.so.3"),
			testimage.File("usr/local/lib/python3.11/dist-packages/triton/__init__.py", []byte("")),
		}, []string{ml + "libkeepme.so.3", "usr/lib/gcc/x86_64-linux-gnu/13/libkeepme.so"}, nil},
		{"triton keeps CUDA libraries", strictPolicy(t), []testimage.Entry{testimage.File(sp+"triton/__init__.py", []byte(""))},
			[]string{ml + "libcublas.so.11"}, []string{ml + "libunused.so.1.0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			entries := pruneImage(t, o, tc.extra...)
			switch tc.name {
			case "plugin dir of a kept owner":
				tc.pol.KeepLibs = []string{"libGLX_mesa.so*"}
			case "a ROCm module of a kept UCX goes from a CUDA image", "a ROCm module of a kept UCX stays without CUDA":
				tc.pol.KeepLibs = []string{"libucs.so*"}
			case "libcublas kept keeps libcublasLt":
				tc.pol.KeepLibs = []string{"usr/lib/x86_64-linux-gnu/libcublas.so.11"}
			}
			fs, res, _ := slimFS(t, tc.pol, testimage.Config{WorkingDir: "/srv/app"}, entries)
			for _, p := range tc.kept {
				if _, ok := fs[p]; !ok {
					t.Errorf("%s dropped", p)
				}
			}
			for _, p := range tc.gone {
				if _, ok := fs[p]; ok {
					t.Errorf("%s kept", p)
				}
			}
			if (res.Report.Prune != nil) != tc.pol.Prunes() {
				t.Errorf("prune report %v with prune %v", res.Report.Prune, tc.pol.Prunes())
			}
		})
	}
}

// The same input and policy give the same digest with prune on, whatever
// the concurrency; prune changes the digest.
func TestPruneReproducible(t *testing.T) {
	o := buildELF(t)
	src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.Layer(t, pruneImage(t, o), "gzip")))
	digest := func(pol *Policy, conc int) v1.Hash {
		res := rewrite(t, src, Options{Policy: pol, Concurrency: conc})
		img, err := res.Image(nil)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d
	}
	a, b := digest(strictPolicy(t), 1), digest(strictPolicy(t), 4)
	if a != b {
		t.Errorf("digests differ: %s vs %s", a, b)
	}
	if c := digest(runtimePolicy(t), 1); c == a {
		t.Error("prune did not change the digest")
	}
}

// ELF objects whose dynamic section lies beyond the buffered head are read
// through the spill, in a real rewrite (the layer is streamed, not held).
func TestPruneBigLibrary(t *testing.T) {
	o := buildELF(t)
	dir := t.TempDir()
	big := filepath.Join(dir, "big.c")
	// 3 MiB of read-only data puts .dynamic far beyond the 1 MiB head.
	os.WriteFile(big, []byte(fmt.Sprintf("const char blob[%d] = {1};\nint pd(void); int big(void){return blob[7]+pd();}\n", 3<<20)), 0o644)
	os.WriteFile(filepath.Join(dir, "libplugdep.so.1"), o["libplugdep.so.1"], 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(dir, "libbig.so.1"), big, "-Wl,-soname,libbig.so.1",
		filepath.Join(dir, "libplugdep.so.1")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	bigLib, _ := os.ReadFile(filepath.Join(dir, "libbig.so.1"))
	fs, res, _ := slimFS(t, strictPolicy(t), testimage.Config{}, []testimage.Entry{
		testimage.File("usr/lib/python3/dist-packages/big/_big.so", bigLib),
		testimage.File(ml+"libplugdep.so.1", o["libplugdep.so.1"]),
		testimage.File(ml+"libunused.so.1.0", o["libunused.so.1.0"]),
	})
	if _, ok := fs[ml+"libplugdep.so.1"]; !ok {
		t.Errorf("libplugdep.so.1 (needed by a 3 MiB extension) dropped; report %+v", res.Report.Prune)
	}
	if _, ok := fs[ml+"libunused.so.1.0"]; ok {
		t.Error("libunused kept")
	}
	if len(res.Report.Prune.Unreadable) != 0 {
		t.Errorf("unreadable: %v", res.Report.Prune.Unreadable)
	}
}
