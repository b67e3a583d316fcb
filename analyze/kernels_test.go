package analyze_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/internal/testimage"
)

// fatbin builds a fat binary the way nvcc lays it out: entries of
// (kind, arch) with small payloads.
func fatbin(entries ...[2]int) []byte {
	var body []byte
	for _, e := range entries {
		h := make([]byte, 64)
		binary.LittleEndian.PutUint16(h[0:], uint16(e[0]))
		binary.LittleEndian.PutUint32(h[4:], 64)
		binary.LittleEndian.PutUint64(h[8:], 24)
		binary.LittleEndian.PutUint32(h[28:], uint32(e[1]))
		body = append(body, h...)
		body = append(body, []byte("\x7fELF payload of 24 bytes")...)
	}
	hdr := make([]byte, 16)
	copy(hdr, []byte{0x50, 0xed, 0x55, 0xba})
	binary.LittleEndian.PutUint16(hdr[4:], 1)
	binary.LittleEndian.PutUint16(hdr[6:], 16)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(len(body)))
	return append(hdr, body...)
}

// library is a fake shared object: filler, a decoy magic with a wrong
// version, then the fat binary starting at offset at.
func library(at int, fb []byte) []byte {
	b := make([]byte, at)
	for i := range b {
		b[i] = byte(i * 31)
	}
	copy(b[100:], []byte{0x50, 0xed, 0x55, 0xba, 9, 0}) // not a fat binary
	b = append(b, fb...)
	return append(b, make([]byte, 4096)...)
}

func TestKernelCoverage(t *testing.T) {
	const cubin, ptx = 2, 1
	dir := t.TempDir()
	l := testimage.Layer(t, []testimage.Entry{
		// Straddles the scanner's 1 MiB window.
		testimage.File("usr/lib/libops.so.1", library(1<<20-2, fatbin([2]int{cubin, 80}, [2]int{ptx, 90}))),
		testimage.File("opt/venv/site-packages/flash_attn/fa.cpython-311-x86_64-linux-gnu.so", library(5000, fatbin([2]int{cubin, 90}))),
		testimage.File("usr/lib/libplain.so", library(5000, nil)),
		testimage.Sized("usr/bin/tool", 3000),
	}, "zstd")
	testimage.WriteLayout(t, dir, "k", testimage.Image(t, testimage.Config{}, l))
	gpus, err := analyze.ParseGPUTargets([]string{"a100", "l4", "h100", "rtx5090"})
	if err != nil {
		t.Fatal(err)
	}
	r := openAndAnalyze(t, "oci:"+dir+":k", analyze.Options{GPUs: gpus})
	k := r.Kernels
	if k == nil {
		t.Fatal("no kernel report")
	}
	if strings.Join(k.SM, ",") != "sm_80,sm_90" || strings.Join(k.PTX, ",") != "compute_90" {
		t.Errorf("archs = %v %v", k.SM, k.PTX)
	}
	if len(k.Libraries) != 2 || k.Libraries[0].Path != "/opt/venv/site-packages/flash_attn/fa.cpython-311-x86_64-linux-gnu.so" || k.Libraries[1].Path != "/usr/lib/libops.so.1" {
		t.Fatalf("libraries = %+v", k.Libraries)
	}
	fa, ops := k.Libraries[0].Path, k.Libraries[1].Path
	want := map[string]struct {
		covered      bool
		jit, missing string
	}{
		"A100":             {false, "", fa},  // sm_90 SASS does not run on 8.0
		"L4":               {false, "", fa},  // sm_80 runs on 8.9; sm_90 does not
		"H100":             {true, ops, ""},  // libops only through compute_90 PTX
		"GeForce RTX 50xx": {false, ops, fa}, // PTX JIT forward; cubins never cross majors
	}
	if len(k.GPUs) != 4 {
		t.Fatalf("gpus = %+v", k.GPUs)
	}
	for _, g := range k.GPUs {
		w, ok := want[g.GPU]
		if !ok {
			t.Errorf("unexpected GPU %q", g.GPU)
			continue
		}
		if g.Covered != w.covered || strings.Join(g.JIT, ",") != w.jit || strings.Join(g.Missing, ",") != w.missing {
			t.Errorf("%s: covered %v jit %v missing %v; want %v %q %q", g.GPU, g.Covered, g.JIT, g.Missing, w.covered, w.jit, w.missing)
		}
	}
	rules, _ := analyze.ParseRules("r.yaml", []byte("require_gpus: [h100, a100]\n"))
	v := rules.Check(r)
	if len(v) != 1 || v[0].Rule != "require_gpus" || !strings.Contains(v[0].Message, "A100") {
		t.Errorf("violations = %+v", v)
	}
}

// TestKernelInventoryRealFatbins reads shared libraries compiled by nvcc
// (testdata/hostcheck/fatbin/gen.sh: the fixture devel image's CUDA 11.8
// nvcc, one kernel) and checks the per-library inventory.
func TestKernelInventoryRealFatbins(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "hostcheck", "fatbin", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dir := t.TempDir()
	l := testimage.Layer(t, []testimage.Entry{
		testimage.File("usr/lib/libk_sm80.so", read("libk_sm80.so")),
		testimage.File("usr/lib/libk_sm80_ptx.so", read("libk_sm80_ptx.so")),
		testimage.File("usr/lib/libk_sm80_sm90.so", read("libk_sm80_sm90.so")),
	}, "gzip")
	testimage.WriteLayout(t, dir, "k", testimage.Image(t, testimage.Config{}, l))
	r := openAndAnalyze(t, "oci:"+dir+":k", analyze.Options{Kernels: true})
	got := map[string]string{}
	for _, lib := range r.Kernels.Libraries {
		got[lib.Path] = strings.Join(lib.SM, " ") + " | " + strings.Join(lib.PTX, " ")
	}
	want := map[string]string{
		"/usr/lib/libk_sm80.so":      "sm_80 | ",
		"/usr/lib/libk_sm80_ptx.so":  "sm_80 | compute_80",
		"/usr/lib/libk_sm80_sm90.so": "sm_80 sm_90 | ",
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %q, want %q", p, got[p], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("libraries = %v", got)
	}
	// Overall coverage: sm_80 cubins run on 8.x; nothing but compute_80
	// PTX reaches 9.0, and libk_sm80.so has none.
	runs := map[string]string{}
	for _, c := range r.Kernels.Coverage {
		runs[c.Arch] = c.Runs
	}
	for arch, w := range map[string]string{"sm_70": "none", "sm_75": "none", "sm_80": "sass", "sm_86": "sass", "sm_89": "sass", "sm_90": "none", "sm_120": "none"} {
		if runs[arch] != w {
			t.Errorf("coverage %s = %q, want %q (all: %v)", arch, runs[arch], w, runs)
		}
	}
	h100, err := r.Kernels.Support("H100", "9.0")
	if err != nil {
		t.Fatal(err)
	}
	if h100.Covered || strings.Join(h100.Missing, ",") != "/usr/lib/libk_sm80.so" || strings.Join(h100.JIT, ",") != "/usr/lib/libk_sm80_ptx.so" {
		t.Errorf("H100 support = %+v", h100)
	}
	if _, err := r.Kernels.Support("x", "9"); err == nil {
		t.Error("Support accepted compute capability 9")
	}
	var tbl strings.Builder
	if err := r.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"/usr/lib/libk_sm80_ptx.so", "libk_sm80_sm90.so  sm_80 sm_90", "sm_80        compute_80", "no kernel on", "sm_70 sm_72 sm_75 sm_90"} {
		if !strings.Contains(tbl.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, tbl.String())
		}
	}
}

// A profiling library without code for the GPU (CUPTI) does not break
// require_gpus, as it does not stop the container computing; a compute
// library does.
func TestRequireGPUsIgnoresProfilingLibraries(t *testing.T) {
	const cubin = 2
	for _, tc := range []struct {
		lib  string
		fail bool
	}{
		{"usr/lib/x86_64-linux-gnu/libcupti.so.2024.1.1", false},
		{"usr/lib/x86_64-linux-gnu/libaccinj64.so.12.4.127", false},
		{"usr/lib/x86_64-linux-gnu/libcufftw.so.11", true},
	} {
		dir := t.TempDir()
		l := testimage.Layer(t, []testimage.Entry{
			testimage.File("usr/lib/libops.so.1", library(5000, fatbin([2]int{cubin, 90}))),
			testimage.File(tc.lib, library(5000, fatbin([2]int{cubin, 80}))),
		}, "zstd")
		testimage.WriteLayout(t, dir, "k", testimage.Image(t, testimage.Config{}, l))
		gpus, _ := analyze.ParseGPUTargets([]string{"h100"})
		r := openAndAnalyze(t, "oci:"+dir+":k", analyze.Options{GPUs: gpus})
		rules, _ := analyze.ParseRules("r.yaml", []byte("require_gpus: [h100]\n"))
		if v := rules.Check(r); (len(v) > 0) != tc.fail {
			t.Errorf("%s: violations %+v, want failure %v", tc.lib, v, tc.fail)
		}
	}
}
