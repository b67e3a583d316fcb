package slim

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/registry"
)

func slimFS(t *testing.T, pol *Policy, cfg testimage.Config, ls ...[]testimage.Entry) (map[string]fsEntry, *Result, v1.Image) {
	t.Helper()
	var vls []v1.Layer
	for _, l := range ls {
		vls = append(vls, testimage.Layer(t, l, "gzip"))
	}
	src := openLayout(t, testimage.Image(t, cfg, vls...))
	res := rewrite(t, src, Options{Policy: pol})
	img, err := res.Image(nil)
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := flatten(t, img)
	return fs, res, img
}

func keepAll() *Policy { return &Policy{Name: "test", Weights: WeightsKeep, JIT: JITKeep} }

// Squash semantics: whiteouts, opaque directories, overwrites, a directory
// replaced by a file, across layers; the output has no whiteouts and each
// path once (flatten fails otherwise).
func TestSquash(t *testing.T) {
	fs, res, _ := slimFS(t, keepAll(), testimage.Config{},
		[]testimage.Entry{
			testimage.Dir("etc"), testimage.File("etc/a", []byte("a1")), testimage.File("etc/b", []byte("b1")),
			testimage.Dir("opt/o"), testimage.File("opt/o/x", []byte("x")), testimage.File("opt/o/y", []byte("y")),
			testimage.Dir("d"), testimage.File("d/inner", []byte("i")),
			testimage.Sized("var/big", 10000),
		},
		[]testimage.Entry{
			testimage.File("etc/a", []byte("a2")),
			testimage.Whiteout("etc/b"),
			testimage.Opaque("opt/o"), testimage.File("opt/o/z", []byte("z")),
			testimage.File("d", []byte("now a file")),
			testimage.Whiteout("var/big"),
		},
		[]testimage.Entry{testimage.File("etc/b", []byte("b3"))},
	)
	want := map[string]string{"etc/a": "a2", "etc/b": "b3", "opt/o/z": "z", "d": "now a file"}
	for p, body := range want {
		if fs[p].body != body || fs[p].typ != tar.TypeReg {
			t.Errorf("%s = %q (type %c), want %q", p, fs[p].body, fs[p].typ, body)
		}
	}
	for _, gone := range []string{"opt/o/x", "opt/o/y", "d/inner", "var/big"} {
		if _, ok := fs[gone]; ok {
			t.Errorf("%s survived", gone)
		}
	}
	var sup int64
	for _, s := range res.Report.Removed {
		if s.Why == whySuperseded {
			sup = s.Bytes
		}
	}
	if want := int64(2 + 2 + 1 + 1 + 1 + 10000); sup != want {
		t.Errorf("superseded bytes %d, want %d", sup, want)
	}
}

// A hardlink whose target is dropped (or superseded) is written as a file
// with the target's content; one whose target stays keeps its link.
func TestHardlinks(t *testing.T) {
	fs, res, _ := slimFS(t, runtimePolicy(t), testimage.Config{},
		[]testimage.Entry{
			testimage.File("usr/share/doc/tool/manual.txt", []byte("MANUAL")),
			{Name: "usr/bin/manual", Type: tar.TypeLink, Linkname: "usr/share/doc/tool/manual.txt"},
			testimage.File("usr/bin/tool", []byte("TOOL")),
			{Name: "usr/bin/tool2", Type: tar.TypeLink, Linkname: "/usr/bin/tool"},
			testimage.File("etc/old", []byte("OLD")),
		},
		[]testimage.Entry{
			// The link in a later layer to a lower layer's file that this
			// layer then deletes... by overwriting it.
			{Name: "etc/link", Type: tar.TypeLink, Linkname: "etc/old"},
			testimage.File("etc/old", []byte("NEW")),
		},
	)
	if _, ok := fs["usr/share/doc/tool/manual.txt"]; ok {
		t.Error("doc kept")
	}
	if e := fs["usr/bin/manual"]; e.typ != tar.TypeReg || e.body != "MANUAL" {
		t.Errorf("materialized hardlink: %+v", e)
	}
	if e := fs["usr/bin/tool2"]; e.typ != tar.TypeLink || e.link != "usr/bin/tool" {
		t.Errorf("kept hardlink: %+v", e)
	}
	if e := fs["etc/link"]; e.typ != tar.TypeReg || e.body != "OLD" {
		t.Errorf("hardlink to superseded file: %+v", e)
	}
	if fs["etc/old"].body != "NEW" {
		t.Errorf("etc/old = %q", fs["etc/old"].body)
	}
	if res.Report.Materialized != 2 {
		t.Errorf("materialized %d, want 2", res.Report.Materialized)
	}
}

// A CUDA library installed by apt and again by a wheel: one copy stays, the
// wheel's becomes a relative symlink that resolves to it; SONAME links keep
// working. Different content is never deduplicated.
func TestDedupeCUDALibs(t *testing.T) {
	lib := bytes.Repeat([]byte("cublas!"), 1000)
	other := bytes.Repeat([]byte("cufft?"), 1000)
	sp := "usr/local/lib/python3.11/dist-packages/nvidia/"
	fs, res, _ := slimFS(t, runtimePolicy(t), testimage.Config{},
		[]testimage.Entry{
			testimage.File("usr/lib/x86_64-linux-gnu/libcublas.so.11.11.3.6", lib),
			testimage.Symlink("usr/lib/x86_64-linux-gnu/libcublas.so.11", "libcublas.so.11.11.3.6"),
			testimage.File("usr/lib/x86_64-linux-gnu/libcufft.so.10.9.0.58", other),
		},
		[]testimage.Entry{
			testimage.File(sp+"cublas/lib/libcublas.so.11", lib),
			testimage.File(sp+"cufft/lib/libcufft.so.10", append([]byte("v2"), other...)),
		},
	)
	e := fs[sp+"cublas/lib/libcublas.so.11"]
	if e.typ != tar.TypeSymlink {
		t.Fatalf("wheel copy not replaced: %+v", e)
	}
	target := filepath.Clean(filepath.Join(filepath.Dir(sp+"cublas/lib/libcublas.so.11"), e.link))
	if target != "usr/lib/x86_64-linux-gnu/libcublas.so.11.11.3.6" || fs[target].body != string(lib) {
		t.Errorf("symlink %q resolves to %q", e.link, target)
	}
	if l := fs["usr/lib/x86_64-linux-gnu/libcublas.so.11"]; l.typ != tar.TypeSymlink || fs[filepath.Join("usr/lib/x86_64-linux-gnu", l.link)].body != string(lib) {
		t.Errorf("SONAME link broken: %+v", l)
	}
	if fs[sp+"cufft/lib/libcufft.so.10"].typ != tar.TypeReg {
		t.Error("a different build was deduplicated")
	}
	found := false
	for _, k := range res.Report.Kept {
		found = found || strings.Contains(k.Reason, "different content")
	}
	if !found {
		t.Errorf("report does not say why libcufft stayed: %+v", res.Report.Kept)
	}
}

// Output layers are ordered OS, CUDA, Python, app whatever the source
// order, and directories come no later than their contents.
func TestLayerOrder(t *testing.T) {
	_, res, img := slimFS(t, keepAll(), testimage.Config{CreatedBy: []string{"ADD file:x in /", "COPY . /app # buildkit", "RUN pip install"}},
		[]testimage.Entry{testimage.File("etc/os-release", []byte("debian")), testimage.Dir("usr/lib/x86_64-linux-gnu")},
		[]testimage.Entry{testimage.File("app/main.py", []byte("main")), testimage.File("srv/data.txt", []byte("d"))},
		[]testimage.Entry{
			testimage.File("usr/lib/python3/dist-packages/numpy/__init__.py", []byte("np")),
			testimage.File("usr/lib/x86_64-linux-gnu/libcudart.so.11.8.89", []byte("cudart")),
		},
	)
	var names []string
	for _, l := range res.Report.Layers {
		names = append(names, l.Name)
	}
	if got := strings.Join(names, ","); got != "os,cuda,python,app" {
		t.Fatalf("layers %s", got)
	}
	ls, _ := img.Layers()
	where := map[string]int{}
	for i, l := range ls {
		rc, _ := l.Uncompressed()
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			where[strings.TrimSuffix(h.Name, "/")] = i
		}
		rc.Close()
	}
	for p, want := range map[string]int{"etc/os-release": 0, "usr/lib/x86_64-linux-gnu": 0, "usr/lib/x86_64-linux-gnu/libcudart.so.11.8.89": 1,
		"usr/lib/python3/dist-packages/numpy/__init__.py": 2, "app/main.py": 3, "srv/data.txt": 3} {
		if where[p] != want {
			t.Errorf("%s in layer %d, want %d", p, where[p], want)
		}
	}
}

// The same input and policy give the same digest, across work directories
// and concurrency; another level gives another digest.
func TestReproducible(t *testing.T) {
	img := testimage.Image(t, testimage.Config{Env: []string{"A=1"}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/lib/libx.so", 300000), testimage.File("usr/include/x.h", []byte("h")), testimage.File("app/a.py", []byte("a"))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/lib/x86_64-linux-gnu/libcudart.so.11.8.89", 200000), testimage.File("app/b.py", []byte("b"))}, "zstd"),
	)
	src := openLayout(t, img)
	digest := func(o Options) v1.Hash {
		o.Policy = runtimePolicy(t)
		res := rewrite(t, src, o)
		out, err := res.Image(map[string]string{"l": "v"})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := out.Digest()
		return d
	}
	a := digest(Options{Concurrency: 1})
	b := digest(Options{Concurrency: 4})
	if a != b {
		t.Errorf("digests differ: %s vs %s", a, b)
	}
	if c := digest(Options{Level: 19}); c == a {
		t.Error("level 19 gave the level 3 digest")
	}
}

type collect struct {
	files map[string][]byte
}

func (c *collect) Divert(p string, hdr *tar.Header, r io.Reader) error {
	b, err := io.ReadAll(r)
	c.files[p] = b
	return err
}

type lazyDiverter struct{}

func (lazyDiverter) Divert(string, *tar.Header, io.Reader) error { return nil }

// Weights go to the diverter (content intact) and leave the image; without
// a diverter they stay and the report says so; a diverter that does not
// read fails the rewrite.
func TestWeights(t *testing.T) {
	w := safetensors("app/models/model.safetensors", 5000)
	layer := []testimage.Entry{w, testimage.File("app/main.py", []byte("m"))}
	src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.Layer(t, layer, "gzip")))

	c := &collect{files: map[string][]byte{}}
	res := rewrite(t, src, Options{Policy: runtimePolicy(t), Divert: c})
	if !bytes.Equal(c.files["/app/models/model.safetensors"], w.Body) {
		t.Errorf("diverted %d files, content intact: %v", len(c.files), bytes.Equal(c.files["/app/models/model.safetensors"], w.Body))
	}
	img, _ := res.Image(nil)
	fs, _ := flatten(t, img)
	if _, ok := fs["app/models/model.safetensors"]; ok {
		t.Error("diverted weights still in the image")
	}
	if res.Report.DivertedFiles != 1 || res.Report.DivertedBytes != 5000 {
		t.Errorf("report: %d files %d bytes", res.Report.DivertedFiles, res.Report.DivertedBytes)
	}

	res = rewrite(t, src, Options{Policy: runtimePolicy(t)})
	img, _ = res.Image(nil)
	fs, _ = flatten(t, img)
	if fs["app/models/model.safetensors"].body != string(w.Body) {
		t.Error("weights lost without a diverter")
	}
	if len(res.Report.Kept) != 1 || !strings.Contains(res.Report.Kept[0].Reason, "--weights-to") {
		t.Errorf("report does not say weights stayed: %+v", res.Report.Kept)
	}

	_, err := Rewrite(context.Background(), src, Options{Policy: runtimePolicy(t), Divert: lazyDiverter{}, WorkDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "unread") {
		t.Errorf("lazy diverter: %v", err)
	}
}

// Run-time kernel compilers keep nvcc and headers (jit: keep) or fail the
// rewrite naming the package (jit: refuse) unless forced.
func TestJIT(t *testing.T) {
	sp := "usr/local/lib/python3.11/site-packages/"
	base := []testimage.Entry{
		testimage.Sized("usr/local/cuda/bin/nvcc", 3000),
		testimage.File("usr/local/cuda/include/cuda.h", []byte("h")),
	}
	cases := []struct {
		name    string
		files   []testimage.Entry
		pkg     string
		jit     JITAction
		force   bool
		wantErr bool
		kept    bool
	}{
		{"none", nil, "", JITKeep, false, false, false},
		{"torch alone", []testimage.Entry{testimage.File(sp+"torch/utils/cpp_extension.py", []byte("def load_inline(): cpp_extension.load("))}, "", JITKeep, false, false, false},
		{"triton keep", []testimage.Entry{testimage.File(sp+"triton/__init__.py", []byte(""))}, "triton", JITKeep, false, false, true},
		{"flashinfer refuse", []testimage.Entry{testimage.File(sp+"flashinfer/__init__.py", []byte(""))}, "flashinfer", JITRefuse, false, true, false},
		{"deep_gemm forced", []testimage.Entry{testimage.File(sp+"deep_gemm/__init__.py", []byte(""))}, "deep_gemm", JITRefuse, true, false, false},
		{"cpp_extension user", []testimage.Entry{testimage.File(sp+"myops/ops.py", []byte("from torch.utils.cpp_extension import load\nmod = load(name='x')"))}, "myops", JITKeep, false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := runtimePolicy(t)
			pol.JIT = tc.jit
			src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.Layer(t, append(append([]testimage.Entry{}, base...), tc.files...), "gzip")))
			res, err := Rewrite(context.Background(), src, Options{Policy: pol, WorkDir: t.TempDir(), Force: tc.force})
			if tc.wantErr {
				var je *JITError
				if !errors.As(err, &je) || !strings.Contains(err.Error(), tc.pkg) || !strings.Contains(err.Error(), "nvcc") {
					t.Fatalf("want a JITError naming %s and nvcc, got %v", tc.pkg, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			img, _ := res.Image(nil)
			fs, _ := flatten(t, img)
			_, nvcc := fs["usr/local/cuda/bin/nvcc"]
			_, hdr := fs["usr/local/cuda/include/cuda.h"]
			if nvcc != tc.kept || hdr != tc.kept {
				t.Errorf("nvcc kept %v, header kept %v; want %v", nvcc, hdr, tc.kept)
			}
			if (tc.pkg != "") != (len(res.Report.JIT) == 1) || tc.pkg != "" && res.Report.JIT[0].Package != tc.pkg {
				t.Errorf("report JIT %+v, want %q", res.Report.JIT, tc.pkg)
			}
			if tc.force && len(res.Report.Warnings) == 0 {
				t.Error("--force without a warning")
			}
		})
	}
}

// Hostile layers are refused with an error naming the entry, and nothing
// is left in the work directory's blobs.
func TestHostile(t *testing.T) {
	cases := []struct {
		name  string
		ls    [][]testimage.Entry
		inErr string
	}{
		{"dotdot", [][]testimage.Entry{{testimage.File("../../etc/passwd", []byte("x"))}}, "../../etc/passwd"},
		{"absolute", [][]testimage.Entry{{testimage.File("/etc/passwd", []byte("x"))}}, "/etc/passwd"},
		{"symlink climbs out", [][]testimage.Entry{{testimage.Symlink("a/evil", "../../../etc")}}, "a/evil"},
		{"write through symlink", [][]testimage.Entry{{testimage.Symlink("evil", "/etc")}, {testimage.File("evil/passwd", []byte("x"))}}, "through the symlink"},
		{"hardlink out", [][]testimage.Entry{{{Name: "h", Type: tar.TypeLink, Linkname: "../../etc/shadow"}}}, "leaves the image root"},
		// One rule with the EROFS conversion (layers.CheckEntry): entries
		// tar readers disagree on are refused, not written on.
		{"volume label", [][]testimage.Entry{{{Name: "label", Type: 'V'}}}, "tar type 'V'"},
		{"contiguous file", [][]testimage.Entry{{{Name: "cont", Type: tar.TypeCont}}}, "tar type '7'"},
		{"xattr name over 255", [][]testimage.Entry{{{Name: "x", Body: []byte("x"), Xattrs: map[string]string{"user." + strings.Repeat("a", 295): "v"}}}}, "over Linux's limit of 255"},
		{"hardlink missing", [][]testimage.Entry{{{Name: "h", Type: tar.TypeLink, Linkname: "nope"}}}, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var vls []v1.Layer
			for _, l := range tc.ls {
				vls = append(vls, testimage.Layer(t, l, "gzip"))
			}
			src := openLayout(t, testimage.Image(t, testimage.Config{}, vls...))
			work := t.TempDir()
			_, err := Rewrite(context.Background(), src, Options{Policy: runtimePolicy(t), WorkDir: work})
			if err == nil || !strings.Contains(err.Error(), tc.inErr) {
				t.Fatalf("want an error mentioning %q, got %v", tc.inErr, err)
			}
			if m, _ := filepath.Glob(filepath.Join(work, "blobs", "*")); len(m) > 0 {
				t.Errorf("blobs written: %v", m)
			}
		})
	}
}

// TestHostileSparse (N7): a few hundred bytes declaring a 64 GiB
// GNU-sparse file are refused at the header, in the scan, before slim
// reads (or writes) a byte of it.
func TestHostileSparse(t *testing.T) {
	for _, tb := range [][]byte{testimage.SparseTar("usr/lib/libcublas.so.12", 64<<30), testimage.SparsePAXTar("usr/lib/libcublas.so.12", 64<<30)} {
		src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.RawLayer(tb, types.OCIUncompressedLayer)))
		work := t.TempDir()
		start := time.Now()
		_, err := Rewrite(context.Background(), src, Options{Policy: runtimePolicy(t), WorkDir: work})
		if err == nil || !strings.Contains(err.Error(), `"usr/lib/libcublas.so.12" is a GNU sparse file`) {
			t.Fatalf("want the sparse entry refused, got %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
	}
}

// A blob whose bytes do not match its digest fails the rewrite before any
// output blob exists.
func TestCorruptBlob(t *testing.T) {
	good := testimage.Tar(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))})
	bad := bytes.Clone(good)
	bad[600] ^= 0xff
	lying := testimage.Lying(bad, mustDigest(good), mustDigest(good), types.OCIUncompressedLayer)
	src := openLayout(t, testimage.Image(t, testimage.Config{}, lying))
	work := t.TempDir()
	_, err := Rewrite(context.Background(), src, Options{Policy: runtimePolicy(t), WorkDir: work})
	if err == nil || !registry.IsIntegrityError(err) {
		t.Fatalf("want an integrity error, got %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(work, "blobs", "*")); len(m) > 0 {
		t.Errorf("blobs written: %v", m)
	}
	if _, err := os.Stat(work); err != nil {
		t.Fatal(err)
	}
}

func mustDigest(b []byte) v1.Hash {
	h, _, _ := v1.SHA256(bytes.NewReader(b))
	return h
}
