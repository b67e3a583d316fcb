//go:build integration

package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testdaemon"

	"github.com/kiln-build/kiln/layers"
)

// extract streams the named files (image path → destination) out of ref,
// walking layers in order and stopping once every file has been seen in
// some layer (the fixtures never change them in later layers).
func extract(t *testing.T, ref string, files map[string]string) {
	t.Helper()
	ctx := context.Background()
	img, err := testkit.OpenImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	seen := map[string]bool{}
	for _, l := range img.Layers {
		if len(seen) == len(files) {
			break
		}
		_, err := l.Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, body io.Reader) error {
			dst, ok := files[e.Path]
			if !ok || !e.IsRegular() {
				return nil
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, body); err != nil {
				f.Close()
				return err
			}
			seen[e.Path] = true
			return f.Close()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for p := range files {
		if !seen[p] {
			t.Fatalf("%s not in %s", p, ref)
		}
	}
}

// cuobjdumpList runs cuobjdump with args and lib ("--list-elf"; "-all",
// "--list-elf" for every fat binary section, __nv_relfatbin too) and
// returns the architecture suffixes it lists ("sm_90", "sm_90a"), counted.
func cuobjdumpList(t *testing.T, cuobjdump, lib string, args ...string) map[string]int {
	t.Helper()
	out, err := exec.Command(cuobjdump, append(args, lib)...).Output()
	if err != nil {
		t.Fatalf("cuobjdump %s %s: %v", strings.Join(args, " "), lib, err)
	}
	n := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ".")
		if len(f) >= 2 {
			n[f[len(f)-2]]++ // NAME.N.sm_90.cubin
		}
	}
	return n
}

// extractCubins extracts into dir the cubins of lib whose names contain
// sub (cuobjdump flags... -xelf sub lib, which decompresses each) and
// returns their paths.
func extractCubins(t *testing.T, cuobjdump, lib, sub, dir string, flags ...string) []string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cuobjdump, slices.Concat(flags, []string{"-xelf", sub, lib})...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cuobjdump -xelf %s: %v\n%s", sub, err, out)
	}
	ents, _ := os.ReadDir(dir)
	var paths []string
	for _, e := range ents {
		paths = append(paths, filepath.Join(dir, e.Name()))
	}
	return paths
}

// cubinSums returns the sha256 sums, sorted, of the cubins extractCubins
// gives, removing each.
func cubinSums(t *testing.T, cuobjdump, lib, sub, dir string, flags ...string) []string {
	t.Helper()
	var sums []string
	for _, p := range extractCubins(t, cuobjdump, lib, sub, dir, flags...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		sums = append(sums, hex.EncodeToString(s[:]))
		os.Remove(p)
	}
	sort.Strings(sums)
	return sums
}

type kernelSupport struct {
	Kernels struct {
		GPUs []struct {
			GPU     string   `json:"gpu"`
			Covered bool     `json:"covered"`
			JIT     []string `json:"jit"`
			Missing []string `json:"missing"`
		} `json:"gpus"`
	} `json:"kernels"`
}

func (r slimRun) h100Support(t *testing.T, ref string) kernelSupport {
	t.Helper()
	out, err := exec.Command(r.bin, "analyze", ref, "--gpu", "h100", "--json", "--progress", "none").Output()
	if err != nil {
		t.Fatalf("kiln analyze --gpu h100 %s: %v", ref, err)
	}
	var k kernelSupport
	if err := json.Unmarshal(out, &k); err != nil || len(k.Kernels.GPUs) != 1 {
		t.Fatalf("analyze report: %v %s", err, out)
	}
	return k
}

// checkTorchH100 checks libtorch_cuda in an H100 slim (slimRef) of the app
// fixture: its fat binaries keep exactly the sm_90 and sm_90a cubins (and
// the compute_90 PTX with keepPTX), and the proof comes from NVIDIA's own
// tool (cuobjdump 12.4, taken from the fixture): it lists exactly those,
// extracts every kept cubin (decompressing it) byte-identical to the
// unpruned library's, and disassembles them; kiln analyze says the H100's
// coverage is what it was.
func (r slimRun) checkTorchH100(t *testing.T, slimRef string, kept, dropped []string, keepPTX bool) {
	t.Helper()
	const lib = "usr/lib/x86_64-linux-gnu/libtorch_cuda.so.2.6.0"
	wantKept := []string{"sm_90", "sm_90a"}
	if keepPTX {
		wantKept = append(wantKept, "compute_90")
	}
	if !reflect.DeepEqual(kept, wantKept) {
		t.Errorf("libtorch_cuda kept %v, want %v", kept, wantKept)
	}
	for _, a := range []string{"sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"} {
		if !slices.Contains(dropped, a) {
			t.Errorf("libtorch_cuda dropped %v, want %s among them", dropped, a)
		}
	}
	// Every library the slim image keeps runs on the H100 as it did in the
	// source: natively, through JIT, or not at all (the source also has
	// libraries without sm_90 code, which runtime-strict drops).
	before, after := r.h100Support(t, r.src).Kernels.GPUs[0], r.h100Support(t, slimRef).Kernels.GPUs[0]
	for _, l := range after.JIT {
		if !slices.Contains(before.JIT, l) {
			t.Errorf("%s runs on an H100 only through JIT after pruning, natively before", l)
		}
	}
	for _, l := range after.Missing {
		if !slices.Contains(before.Missing, l) {
			t.Errorf("%s has no code for an H100 after pruning", l)
		}
	}
	if !after.Covered {
		t.Errorf("H100 not covered after pruning: %+v", after)
	}

	cuobjdump := filepath.Join(r.scratch, "cuobjdump")
	orig := filepath.Join(r.scratch, "libtorch_cuda.orig.so")
	pruned := filepath.Join(r.scratch, "libtorch_cuda.so")
	// cuobjdump -sass runs nvdisasm from its own directory.
	extract(t, r.src, map[string]string{"usr/bin/cuobjdump": cuobjdump, "usr/bin/nvdisasm": filepath.Join(r.scratch, "nvdisasm"), lib: orig})
	extract(t, slimRef, map[string]string{lib: pruned})
	if a, b := fileSize(t, orig), fileSize(t, pruned); a != b {
		t.Errorf("pruned libtorch_cuda is %d bytes, the original %d: offsets moved", b, a)
	}
	elfs := cuobjdumpList(t, cuobjdump, pruned, "--list-elf")
	if want := map[string]int{"sm_90": 341, "sm_90a": 2}; !reflect.DeepEqual(elfs, want) {
		t.Errorf("cuobjdump --list-elf: %v, want %v", elfs, want)
	}
	wantPTX := map[string]int{}
	if keepPTX {
		wantPTX["sm_90"] = 341
	}
	if ptx := cuobjdumpList(t, cuobjdump, pruned, "--list-ptx"); len(ptx) != len(wantPTX) || keepPTX && !reflect.DeepEqual(ptx, wantPTX) {
		t.Errorf("cuobjdump --list-ptx: %v, want %v", ptx, wantPTX)
	}
	want := cubinSums(t, cuobjdump, orig, "sm_90", filepath.Join(r.scratch, "x-orig"))
	got := cubinSums(t, cuobjdump, pruned, "sm_90", filepath.Join(r.scratch, "x-pruned"))
	if len(got) != 343 || !reflect.DeepEqual(got, want) {
		t.Errorf("kept cubins differ from the original's: %d vs %d", len(got), len(want))
	}
	os.Remove(orig)
	// Disassembling all 343 takes cuobjdump over ten minutes on two cores;
	// the sm_90a pair and the first cubins listed are disassembled here,
	// the rest were decompressed and compared above.
	for _, sub := range []string{"sm_90a", ".1.sm_90.", ".2.sm_90.", ".3.sm_90."} {
		disassemble(t, cuobjdump, pruned, sub, r.scratch)
	}
	os.Remove(pruned)
}

// disassemble checks cuobjdump -sass disassembles, as sm_90 code, each
// cubin extractCubins gives (at least one).
func disassemble(t *testing.T, cuobjdump, lib, sub, scratch string, flags ...string) {
	t.Helper()
	paths := extractCubins(t, cuobjdump, lib, sub, filepath.Join(scratch, "sass"), flags...)
	if len(paths) == 0 {
		t.Fatalf("no cubin named *%s* in %s", sub, lib)
	}
	for _, p := range paths {
		cmd := exec.Command(cuobjdump, "-sass", p)
		// cuobjdump leaves nvdisasm's tmpxft_* files in TMPDIR: keep
		// them in the test's scratch, which is removed.
		cmd.Env = append(os.Environ(), "TMPDIR="+scratch)
		sass, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(sass), "code for sm_90") {
			t.Errorf("cuobjdump -sass %s: %v (%d bytes): %.300s", filepath.Base(p), err, len(sass), sass)
		}
		os.Remove(p)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestSlimAppFixtureGPUsNVIDIALibs is the most slim cuts for one GPU
// family: runtime-strict --gpus h100 --prune-nvidia-libs --keep-ptx=false
// (README: "GPU code for the fleet"). NCCL is an -rdc
// build: its 112 relocatable objects in __nv_relfatbin (which cuobjdump
// lists only with -all) keep exactly their sm_90 cubins, byte for byte the
// original's, beside the device-linked one; cuFFT's own fat binaries in
// .data stay whole and the report says where they are; the ROCm stack
// (HIP, comgr, LLVM), pulled in only by UCX's ROCm modules, is gone while
// UCX's other modules stay; kiln analyze finds the H100 covered as before;
// the probe loads libtorch_cuda and NCCL; and the image is at least 6.5×
// smaller than the naive one at zstd's default level (bench/gpucode.sh
// measures 6.88× there and the README's 8.16× at level 19, which took the
// suite's slim 12 minutes of CI under load). The same slim (strictSlim, which
// TestEStargzLazyPull lays out as eStargz) checks what runtime-strict
// prunes (checkPruneLibs) and libtorch_cuda's cubins (checkTorchH100): one
// runtime-strict slim of 5 GB in the suite, not three.
func TestSlimAppFixtureGPUsNVIDIALibs(t *testing.T) {
	testdaemon.PruneAfter(t, true)
	r := newSlimRun(t, "kiln-slim-gpu-nv-it-")
	type lib struct {
		Path     string   `json:"path"`
		Kept     []string `json:"kept"`
		Dropped  []string `json:"dropped"`
		Edited   int      `json:"edited"`
		FatBins  int      `json:"fat_binaries"`
		Warnings []string `json:"warnings"`
	}
	// The sizes and digest; the prune report with each file's reason.
	var rep struct {
		pruneLibsReport
		GPUCode *struct {
			Libraries []lib `json:"libraries"`
		} `json:"gpu_code"`
		Prune *struct {
			Top []struct {
				Path string `json:"path"`
				Why  string `json:"why"`
			} `json:"top"`
		} `json:"prune"`
	}
	dest, _, out, _ := r.strictSlim(t)
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.GPUCode == nil || rep.Prune == nil {
		t.Fatalf("no GPU code or prune report: %s", out)
	}
	// The suite's one runtime-strict slim of the app fixture (strictSlim):
	// its library pruning (checkPruneLibs) and libtorch_cuda's GPU code
	// (checkTorchH100) are checked here too; a slim of 5 GB per check
	// cost CI minutes for nothing new.
	var pl pruneLibsReport
	if err := json.Unmarshal(out, &pl); err != nil {
		t.Fatal(err)
	}
	r.checkPruneLibs(t, dest, string(out), pl)
	libs := map[string]lib{}
	for _, l := range rep.GPUCode.Libraries {
		libs[filepath.Base(l.Path)] = l
	}
	torch, ok := libs["libtorch_cuda.so.2.6.0"]
	if !ok {
		t.Fatalf("no libtorch_cuda in the GPU code report: %s", out)
	}
	r.checkTorchH100(t, dest+"@"+rep.Digest, torch.Kept, torch.Dropped, false)
	const ncclPath = "usr/lib/x86_64-linux-gnu/libnccl.so.2.22.3"
	nccl := libs[filepath.Base(ncclPath)]
	if nccl.Edited != 113 || nccl.FatBins != 113 || !reflect.DeepEqual(nccl.Kept, []string{"sm_90"}) || len(nccl.Warnings) != 0 {
		t.Errorf("NCCL: %+v", nccl)
	}
	cufft := libs["libcufft.so.11.2.1.3"]
	if cufft.Edited != 0 || !slices.ContainsFunc(cufft.Warnings, func(w string) bool { return strings.Contains(w, "17607 of 17608 fat binaries lie in .data") }) {
		t.Errorf("cuFFT: %+v", cufft)
	}
	whyROCm := ""
	for _, f := range rep.Prune.Top {
		if strings.HasSuffix(f.Path, "/libLLVM-17.so.1") {
			whyROCm = f.Why
		}
	}
	if whyROCm == "" {
		t.Errorf("libLLVM-17 (ROCm's comgr needs it) not among the largest dropped: %+v", rep.Prune.Top)
	}

	slimRef := dest + "@" + rep.Digest
	after := r.h100Support(t, slimRef).Kernels.GPUs[0]
	if !after.Covered {
		t.Errorf("H100 not covered after pruning: %+v", after)
	}

	cuobjdump := filepath.Join(r.scratch, "cuobjdump")
	orig := filepath.Join(r.scratch, "libnccl.orig.so")
	pruned := filepath.Join(r.scratch, "libnccl.so")
	ucx := filepath.Join(r.scratch, "libuct_ib.so")
	extract(t, r.src, map[string]string{"usr/bin/cuobjdump": cuobjdump, "usr/bin/nvdisasm": filepath.Join(r.scratch, "nvdisasm"), ncclPath: orig})
	extract(t, slimRef, map[string]string{ncclPath: pruned, "usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0.0.0": ucx})
	if a, b := fileSize(t, orig), fileSize(t, pruned); a != b {
		t.Errorf("pruned NCCL is %d bytes, the original %d: offsets moved", b, a)
	}
	if elfs := cuobjdumpList(t, cuobjdump, pruned, "-all", "--list-elf"); !reflect.DeepEqual(elfs, map[string]int{"sm_90": 113}) {
		t.Errorf("cuobjdump -all --list-elf: %v, want 113 sm_90", elfs)
	}
	want := cubinSums(t, cuobjdump, orig, "sm_90", filepath.Join(r.scratch, "x-orig"), "-all")
	got := cubinSums(t, cuobjdump, pruned, "sm_90", filepath.Join(r.scratch, "x-pruned"), "-all")
	if len(got) != 113 || !reflect.DeepEqual(got, want) {
		t.Errorf("kept cubins differ from the original's: %d vs %d", len(got), len(want))
	}
	// A relocatable object's cubin and the device-linked one disassemble.
	disassemble(t, cuobjdump, pruned, ".2.sm_90.", r.scratch, "-all")
	disassemble(t, cuobjdump, pruned, ".1.sm_90.", r.scratch, "-all") // the device-linked one, listed first
	os.Remove(orig)

	ratio := float64(rep.Before.CompressedSize) / float64(rep.After.CompressedSize)
	t.Logf("compressed %d → %d bytes (%.2fx), %s; ROCm's LLVM dropped: %s", rep.Before.CompressedSize, rep.After.CompressedSize, ratio, rep.Digest, whyROCm)
	if ratio < 6.5 {
		t.Errorf("%.2fx smaller than the naive image, want at least 6.5x at zstd's default level (bench/gpucode.sh: 6.88x)", ratio)
	}
}
