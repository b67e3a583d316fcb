package slim

import (
	"archive/tar"
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

const (
	torchLib  = "usr/lib/python3/dist-packages/torch/lib/libtorch_cuda.so"
	cublasLib = "usr/lib/x86_64-linux-gnu/libcublasLt.so.12.4.5.8"
	faLib     = "usr/local/lib/python3.13/site-packages/flash_attn_2_cuda.cpython-313-x86_64-linux-gnu.so"
)

func fatbinImage(t *testing.T) ([]byte, []byte, []byte, *testimage.Entry) {
	c, ca, p := testimage.Cubin, testimage.CubinA, testimage.PTX
	torch := testimage.FatbinELF(
		testimage.FatbinContainer(1, c(50, 300), c(60, 301), c(70, 302), c(75, 303), c(80, 304), c(86, 305), p(90, 500), c(90, 306)),
		testimage.FatbinContainer(2, c(50, 100), c(80, 101), c(86, 102), ca(90, 103), c(90, 104), p(90, 200)),
	)
	cublas := testimage.FatbinELF(
		testimage.FatbinContainer(3, c(50, 200), c(80, 201), c(90, 202), p(90, 203)),
		testimage.FatbinContainer(4, c(80, 210)),
	)
	fa := testimage.FatbinELF(testimage.FatbinContainer(5, c(80, 400), c(90, 401)))
	hl := testimage.Entry{Name: "usr/lib/libtorch_cuda.so.hardlink", Type: tar.TypeLink, Linkname: torchLib}
	return torch, cublas, fa, &hl
}

func gpuSrc(t *testing.T) *layers.Image {
	t.Helper()
	torch, cublas, fa, hl := fatbinImage(t)
	base := testimage.Layer(t, []testimage.Entry{
		testimage.File(cublasLib, cublas),
		testimage.File("usr/bin/notalib", torch), // an ELF program, not a shared object: never scanned
	}, "gzip")
	app := testimage.Layer(t, []testimage.Entry{
		testimage.File(torchLib, torch),
		*hl,
		testimage.File(faLib, fa),
	}, "gzip")
	return openLayout(t, testimage.Image(t, testimage.Config{}, base, app))
}

func gpuSlim(t *testing.T, src *layers.Image, opts Options) (*Result, map[string]fsEntry) {
	t.Helper()
	opts.Policy = runtimePolicy(t)
	res := rewrite(t, src, opts)
	img, err := res.Image(nil)
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := flatten(t, img)
	return res, fs
}

func archsOf(t *testing.T, b string) []string {
	t.Helper()
	f, err := fatbin.Scan(strings.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return f.Archs()
}

func TestSlimPrunesGPUCodeForTheFleet(t *testing.T) {
	torch, cublas, fa, _ := fatbinImage(t)
	src := gpuSrc(t)
	res, fs := gpuSlim(t, src, Options{GPUs: []fatbin.GPU{{Name: "h100", CC: 90}}})
	got := fs[torchLib].body
	if len(got) != len(torch) {
		t.Fatalf("libtorch_cuda: %d bytes, was %d", len(got), len(torch))
	}
	if want := []string{"sm_90", "sm_90a", "compute_90"}; !reflect.DeepEqual(archsOf(t, got), want) {
		t.Errorf("libtorch_cuda archs %v, want %v", archsOf(t, got), want)
	}
	if fs["usr/lib/libtorch_cuda.so.hardlink"].typ == tar.TypeReg && fs["usr/lib/libtorch_cuda.so.hardlink"].body != got {
		t.Error("a materialized hardlink of libtorch_cuda is not pruned like its target")
	}
	if want := []string{"sm_90"}; !reflect.DeepEqual(archsOf(t, fs[faLib].body), want) {
		t.Errorf("flash_attn archs %v", archsOf(t, fs[faLib].body))
	}
	if fs[cublasLib].body != string(cublas) {
		t.Error("cuBLAS was modified without --prune-nvidia-libs")
	}
	if fs["usr/bin/notalib"].body != string(torch) {
		t.Error("a program (not a shared object) was modified")
	}
	g := res.Report.GPUCode
	if g == nil || len(g.Libraries) != 2 || len(g.NotPruned) != 1 || !strings.Contains(g.License, "--prune-nvidia-libs") {
		t.Fatalf("report %+v", g)
	}
	l := g.Libraries[0]
	if l.Path != "/"+torchLib || !reflect.DeepEqual(l.Dropped, []string{"sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"}) || l.Edited != 2 || l.ZeroedBytes == 0 {
		t.Errorf("torch entry %+v", l)
	}
	if n := g.NotPruned[0]; n.Path != "/"+cublasLib || n.ZeroedBytes == 0 || len(n.Warnings) != 1 {
		t.Errorf("cuBLAS entry %+v", n)
	}
	if g.ZeroedBytes != g.Libraries[0].ZeroedBytes+g.Libraries[1].ZeroedBytes {
		t.Errorf("zeroed %d", g.ZeroedBytes)
	}
	var table bytes.Buffer
	res.Report.WriteTable(&table)
	for _, want := range []string{"GPU code pruned for h100 (sm_90)", "not pruned: 1 NVIDIA libraries"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}

	// Same input and fleet: same digest.
	res2, _ := gpuSlim(t, src, Options{GPUs: []fatbin.GPU{{Name: "h100", CC: 90}}, Concurrency: 1})
	a, _ := res.Image(nil)
	b, _ := res2.Image(nil)
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two slims, two digests: %s %s", da, db)
	}
	// Without a fleet nothing is touched.
	_, plain := gpuSlim(t, src, Options{})
	if plain[torchLib].body != string(torch) || plain[faLib].body != string(fa) {
		t.Error("GPU code changed without --gpus")
	}
}

func TestSlimPrunesNVIDIALibsOnlyWhenAsked(t *testing.T) {
	res, fs := gpuSlim(t, gpuSrc(t), Options{GPUs: []fatbin.GPU{{Name: "h100", CC: 90}}, PruneNVIDIA: true, DropPTX: true})
	// The Ampere-only container stays whole: it has nothing for an H100.
	if want := []string{"sm_80", "sm_90"}; !reflect.DeepEqual(archsOf(t, fs[cublasLib].body), want) {
		t.Errorf("cuBLAS archs %v, want %v", archsOf(t, fs[cublasLib].body), want)
	}
	if want := []string{"sm_90", "sm_90a"}; !reflect.DeepEqual(archsOf(t, fs[torchLib].body), want) {
		t.Errorf("torch archs without PTX %v", archsOf(t, fs[torchLib].body))
	}
	g := res.Report.GPUCode
	if len(g.Libraries) != 3 || len(g.NotPruned) != 0 || !strings.Contains(g.License, "your call") || g.KeepPTX {
		t.Errorf("report %+v", g)
	}
}
