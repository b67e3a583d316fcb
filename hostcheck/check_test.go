package hostcheck_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/hostcheck"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/recipes"
)

var testdata = filepath.Join("..", "testdata", "hostcheck")

func loadHost(t *testing.T, name string) *hostcheck.Host {
	t.Helper()
	h, err := hostcheck.LoadHost(filepath.Join(testdata, "hosts", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// imageEnv reads a recorded image config env (testdata/hostcheck/images).
func imageEnv(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, "images", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Config v1.Config `json:"config"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.Config.Env
}

// scannedImage builds an OCI layout whose only device code is the real
// nvcc-built libraries named (testdata/hostcheck/fatbin), with the env of
// a recorded nvidia/cuda image, and describes it the way kiln host check
// --image does: config read, layers streamed through analyze.
func scannedImage(t *testing.T, env string, libs ...string) *hostcheck.Image {
	t.Helper()
	var entries []testimage.Entry
	for _, l := range libs {
		// "/PATH" is a plain file there (the cuda-compat libraries).
		if strings.HasPrefix(l, "/") {
			entries = append(entries, testimage.Sized(l[1:], 4096))
			continue
		}
		// "SRC=NAME" installs testdata's SRC under another name.
		src, name, ok := strings.Cut(l, "=")
		if !ok {
			name = src
		}
		b, err := os.ReadFile(filepath.Join(testdata, "fatbin", src))
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, testimage.File("usr/lib/x86_64-linux-gnu/"+name, b))
	}
	entries = append(entries, testimage.Sized("usr/bin/app", 4096))
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "app", testimage.Image(t, testimage.Config{Env: imageEnv(t, env)}, testimage.Layer(t, entries, "gzip")))
	img, err := testkit.OpenImage(context.Background(), "oci:"+dir+":app")
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	im, err := hostcheck.FromLayers(context.Background(), img, true, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return im
}

// compat124 is where nvidia/cuda:12.4.1 images keep the cuda-compat
// package's libcuda (forward compatibility loads it).
const compat124 = "/usr/local/cuda-12.4/compat/libcuda.so.550.54.15"

// TestDoneWhen is the acceptance table: described hosts (JSON in
// testdata/hostcheck/hosts) against images with recorded nvidia/cuda env
// and real fat binaries. Each verdict names its reason.
func TestDoneWhen(t *testing.T) {
	type want struct {
		status   hostcheck.Status
		contains []string // in the summary, evidence or fixes
	}
	cases := []struct {
		name  string
		host  string
		env   string
		libs  []string
		ok    bool
		items map[string]want
		// absent is text no item may say.
		absent []string
	}{
		{
			name: "H100 + driver 535 runs a CUDA 12.4 image", host: "h100-535", env: "cuda-12.4.1",
			libs: []string{"libk_sm80_sm90.so", compat124}, ok: true,
			items: map[string]want{
				hostcheck.IDDriver:      {hostcheck.Pass, []string{"driver 535.104.05 (CUDA 12.2), 2 GPU(s): 2× NVIDIA H100 80GB HBM3 (sm_90)"}},
				hostcheck.IDCUDACompat:  {hostcheck.Pass, []string{"forward compatibility", "driver branch 535", "≥ 1.17.5", "cuda-compat in the image: " + compat124}},
				hostcheck.IDRequireCUDA: {hostcheck.Pass, []string{"satisfied by driver 535.104.05"}},
				hostcheck.IDKernels:     {hostcheck.Pass, []string{"every library has SASS for every GPU"}},
				hostcheck.IDToolkit:     {hostcheck.Pass, nil},
				hostcheck.IDEngine:      {hostcheck.Pass, []string{"images can be built here"}},
				hostcheck.IDRegistry:    {hostcheck.Skip, nil},
				hostcheck.IDCompose:     {hostcheck.Pass, []string{"2.27.1"}},
			},
		},
		{
			// Forward compatibility loads the image's own libcuda: an
			// image without cuda-compat (slimmed away) falls back to
			// minor-version compatibility, and PTX no longer JITs.
			name: "H100 + driver 535 without cuda-compat in the image: no forward compatibility", host: "h100-535", env: "cuda-12.4.1",
			libs: []string{"libk_sm80_ptx.so"}, ok: false,
			items: map[string]want{
				hostcheck.IDCUDACompat: {hostcheck.Warn, []string{"minor-version compatibility only", "no cuda-compat libraries (no libcuda.so* under /usr/local/cuda*/compat)", "install cuda-compat-12-4 in the image"}},
				hostcheck.IDKernels:    {hostcheck.Fail, []string{"PTX JIT needs a newer driver"}},
			},
			absent: []string{"cuda-compat libraries cover driver branch"},
		},
		{
			name: "RTX 4090 + driver 550 is refused a CUDA 12.8 image", host: "rtx4090-550", env: "cuda-12.8.1",
			libs: []string{"libk_sm80_sm90.so"}, ok: false,
			items: map[string]want{
				hostcheck.IDRequireCUDA: {hostcheck.Fail, []string{
					"unsatisfied condition cuda>=12.8",
					"nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8",
					"driver branches for geforcertx: none",
					"upgrade the driver to ≥ 570.124.06 (CUDA 12.8 natively)",
					"CUDA 12.4 or older",
					"NVIDIA_DISABLE_REQUIRE=1",
				}},
				// Minor-version compatibility would run SASS-only code.
				hostcheck.IDCUDACompat: {hostcheck.Warn, []string{"minor-version compatibility only", "525.60.13", "only on data-center GPUs, not brand geforcertx"}},
				hostcheck.IDKernels:    {hostcheck.Pass, nil}, // sm_80 SASS runs on 8.9
			},
			// One minimum driver for CUDA 12.8.1 in one report: Table 3's
			// 12.8 Update 1 row, never the GA row's 570.26 as well.
			absent: []string{"570.26"},
		},
		{
			name: "GeForce + driver 470 fails a CUDA 12.0 image", host: "geforce-470", env: "cuda-12.0.1", ok: false,
			items: map[string]want{
				hostcheck.IDDriver:     {hostcheck.Pass, []string{"NVIDIA GeForce RTX 3090 (sm_86)"}},
				hostcheck.IDCUDACompat: {hostcheck.Fail, []string{"below the minor-version floor 525.60.13", "forward compatibility (cuda-compat) works only on data-center GPUs, not brand geforcertx", "upgrade the driver to ≥ 525.85.12", "or at least to ≥ 525.60.13"}},
				// The 12.0 image's brand clauses accept branch 470 even on
				// GeForce: the runtime starts it, CUDA then fails.
				hostcheck.IDRequireCUDA: {hostcheck.Pass, nil},
			},
		},
		{
			name: "GeForce + driver 470 fails a CUDA 12.4 image", host: "geforce-470", env: "cuda-12.4.1", ok: false,
			items: map[string]want{
				hostcheck.IDCUDACompat: {hostcheck.Fail, []string{"CUDA 12.4 cannot initialise on driver 470.223.02 (CUDA 11.4)", "use an image built for CUDA ≤ 11.4"}},
			},
		},
		{
			name: "GeForce + driver 470 fails a CUDA 12.8 image", host: "geforce-470", env: "cuda-12.8.1", ok: false,
			items: map[string]want{
				hostcheck.IDCUDACompat:  {hostcheck.Fail, []string{"upgrade the driver to ≥ 570.124.06 (CUDA 12.8 natively)", "or at least to ≥ 525.60.13"}},
				hostcheck.IDRequireCUDA: {hostcheck.Fail, []string{"NVIDIA_DISABLE_REQUIRE=1 would only skip the check"}},
			},
		},
		{
			name: "sm_80-only code without PTX fails on an sm_90 GPU", host: "h100-535", env: "cuda-12.4.1",
			libs: []string{"libk_sm80.so", "libk_sm80_sm90.so", compat124}, ok: false,
			items: map[string]want{
				hostcheck.IDCUDACompat: {hostcheck.Pass, nil},
				hostcheck.IDKernels: {hostcheck.Fail, []string{
					"NVIDIA H100 80GB HBM3: no kernel image for sm_90",
					"no SASS for sm_90 and no PTX at or below it in 1 libraries: /usr/lib/x86_64-linux-gnu/libk_sm80.so",
					"rebuild for sm_90",
				}},
			},
		},
		{
			// The CUDA 12.4 stack on Blackwell: compute through PTX JIT;
			// CUPTI (kept for torch's profiler) has SASS only.
			name: "B200: only CUPTI lacks sm_100 code, compute through PTX JIT", host: "b200-580", env: "cuda-12.4.1",
			libs: []string{"libk_sm80_ptx.so", "libk_sm80_sm90.so=libcupti.so.2024.1.1"}, ok: true,
			items: map[string]want{
				hostcheck.IDKernels: {hostcheck.Warn, []string{"only profiling/debugging libraries have no code for sm_100", "libcupti.so.2024.1.1", "1 libraries only through PTX JIT"}},
			},
		},
		{
			// Both said: the JIT library and CUPTI's missing sm_90 code.
			name: "H100: CUPTI without sm_90 code beside a PTX-JIT library warns with both", host: "h100-535", env: "cuda-12.8.1",
			libs: []string{"libk_sm80_ptx.so", "libk_sm80.so=libcupti.so.2024.1.1", "/usr/local/cuda-12.8/compat/libcuda.so.570.124.06"}, ok: true,
			items: map[string]want{
				hostcheck.IDKernels: {hostcheck.Warn, []string{"PTX JIT, no profiler kernels", "only profiling/debugging libraries have no code for sm_90", "1 libraries only through PTX JIT"}},
			},
		},
		{
			name: "B200: a compute library without sm_100 code or PTX fails", host: "b200-580", env: "cuda-12.4.1",
			libs: []string{"libk_sm80_sm90.so", "libk_sm80_sm90.so=libcupti.so.2024.1.1"}, ok: false,
			items: map[string]want{
				hostcheck.IDKernels: {hostcheck.Fail, []string{"no SASS for sm_100 and no PTX at or below it in 1 libraries: /usr/lib/x86_64-linux-gnu/libk_sm80_sm90.so"}},
			},
		},
		{
			name: "sm_80 with compute_80 PTX runs on sm_90 through JIT", host: "h100-535", env: "cuda-12.4.1",
			libs: []string{"libk_sm80_ptx.so", compat124}, ok: true,
			items: map[string]want{
				hostcheck.IDKernels: {hostcheck.Warn, []string{"PTX JIT", "slow first start"}},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := loadHost(t, c.host)
			im := scannedImage(t, c.env, c.libs...)
			r := hostcheck.Check(h, im, hostcheck.Options{})
			if r.OK != c.ok {
				t.Errorf("ok = %v, want %v", r.OK, c.ok)
			}
			for id, w := range c.items {
				it := r.Item(id)
				if it == nil {
					t.Fatalf("no item %s", id)
				}
				if it.Status != w.status {
					t.Errorf("%s: %s (%s), want %s; evidence %q", id, it.Status, it.Summary, w.status, it.Evidence)
				}
				all := it.Summary + "\n" + strings.Join(it.Evidence, "\n") + "\n" + strings.Join(it.Fix, "\n")
				for _, s := range w.contains {
					if !strings.Contains(all, s) {
						t.Errorf("%s: %q missing from\n%s", id, s, all)
					}
				}
				if (it.Status == hostcheck.Fail || it.Status == hostcheck.Warn) && it.Summary == "" {
					t.Errorf("%s: %s without a reason", id, it.Status)
				}
				if it.Status == hostcheck.Fail && len(it.Fix) == 0 {
					t.Errorf("%s: fails without a fix", id)
				}
			}
			for _, it := range r.Items {
				all := it.Summary + "\n" + strings.Join(it.Evidence, "\n") + "\n" + strings.Join(it.Fix, "\n")
				for _, a := range c.absent {
					if strings.Contains(all, a) {
						t.Errorf("%s says %q:\n%s", it.ID, a, all)
					}
				}
			}
		})
	}
}

// TestTorchCUDAAboveDriver: a lock whose torch resolved to the cu130 wheels
// (unpinned torch today) carries CUDA 13.0's runtime whatever the base
// image's CUDA; a driver of branch 570 (CUDA 12.8) cannot run it.
func TestTorchCUDAAboveDriver(t *testing.T) {
	lock := func(base, variant string) *hostcheck.Image {
		torch, v := "2.9.1", variant
		return hostcheck.ImageFromLock("kiln.lock", &recipes.Lock{Plan: &recipes.Plan{CUDA: base, Torch: &torch, TorchCUDAVariant: &v}})
	}
	h := loadHost(t, "h200-570")
	it := hostcheck.Check(h, lock("12.8.1", "cu130"), hostcheck.Options{}).Item(hostcheck.IDCUDACompat)
	assertItem(t, it, hostcheck.Warn,
		[]string{"torch 2.9.1+cu130 needs CUDA 13.0 (driver ≥ 580.65.06); driver 570.124.06 supports CUDA 12.8"},
		[]string{"torch 2.9.1+cu130 wheels carry CUDA 13.0's runtime"},
		[]string{"torch: {variant: cu128} or older", "upgrade the driver to ≥ 580.65.06 (CUDA 13.0)"})
	if it := hostcheck.Check(h, lock("12.8.1", "cu128"), hostcheck.Options{}).Item(hostcheck.IDCUDACompat); it.Status != hostcheck.Pass || strings.Contains(it.Summary, "torch") {
		t.Errorf("torch cu128 on a CUDA 12.8 driver: %s %q", it.Status, it.Summary)
	}
	// On a CUDA 13.0 base the wheels run where the base does: through its
	// cuda-compat on this data-center GPU, which the item already weighs.
	if it := hostcheck.Check(h, lock("13.0.0", "cu130"), hostcheck.Options{}).Item(hostcheck.IDCUDACompat); strings.Contains(it.Summary, "torch") || !strings.Contains(it.Summary, "forward compatibility") {
		t.Errorf("torch cu130 on a CUDA 13.0 base: %s %q", it.Status, it.Summary)
	}
}
