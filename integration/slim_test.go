//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testdaemon"
)

// slimRun is what the slim tests start from: the app fixture's OCI
// layout, BuildKit for the probe, a scratch directory under KILN_WORK_DIR
// (the rewrite writes ~2.5 GB: keep it off a small /tmp) and the CLI.
type slimRun struct {
	bin, scratch, src string
}

func newSlimRun(t *testing.T, prefix string) slimRun {
	t.Helper()
	dir, e := fixtures(t)
	if os.Getenv("BUILDKIT_HOST") == "" {
		if os.Getenv("KILN_REQUIRE_FIXTURES") == "1" {
			t.Fatal(`BUILDKIT_HOST unset: eval "$(bash scripts/buildkitd.sh env)"`)
		}
		t.Skip(`no BuildKit (eval "$(bash scripts/buildkitd.sh env)")`)
	}
	scratch, err := os.MkdirTemp(os.Getenv("KILN_WORK_DIR"), prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(scratch) })
	return slimRun{bin: testdaemon.KilnBinary(t), scratch: scratch, src: appRefs(dir, e)["oci"]}
}

// strict is the suite's one runtime-strict slim of the app fixture (5 GB
// in, a few minutes of CI each time): TestSlimAppFixtureGPUsNVIDIALibs
// checks its pruning, TestEStargzLazyPull lays it out as eStargz with the
// startup set its probe recorded. The first test that needs it makes it,
// into an OCI layout under KILN_WORK_DIR (each test's registry prune would
// take a pushed one), which TestMain removes.
var strict struct {
	once   sync.Once
	dir    string // the layout (image/) and the startup list
	digest string
	out    []byte // kiln slim's JSON report
}

// strictProbe loads what runtime-strict and --gpus h100 must keep working:
// libtorch_cuda (Debian's CUDA 12.4 build, linked BIND_NOW against cuBLAS,
// cuFFT, NCCL, cuDNN...) and NCCL, and runs an op.
const strictProbe = "python3 -c 'import torch, ctypes; assert torch.version.cuda == \"12.4\"; ctypes.CDLL(\"libtorch_cuda.so.2.6\"); ctypes.CDLL(\"libnccl.so.2\"); assert torch.ones(2).sum().item() == 2'"

// strictSlim returns the suite's runtime-strict slim (`--policy
// runtime-strict --gpus h100 --prune-nvidia-libs --keep-ptx=false
// --compression zstd --probe strictProbe --startup-list`; zstd at its
// default level: level 19 cost 12 minutes of CI for a size
// bench/gpucode.sh measures): its layout (oci:DIR, read as
// oci:DIR@DIGEST), digest, report and startup list.
func (r slimRun) strictSlim(t *testing.T) (layout, digest string, report []byte, startupList string) {
	t.Helper()
	strict.once.Do(func() {
		dir, err := os.MkdirTemp(os.Getenv("KILN_WORK_DIR"), "kiln-strict-slim-")
		if err != nil {
			t.Fatal(err)
		}
		strict.dir = dir
		var rep struct {
			Digest string `json:"digest"`
		}
		start := time.Now()
		out := r.slim(t, "oci:"+filepath.Join(dir, "image")+":strict", strictProbe, &rep,
			"--policy", "runtime-strict", "--gpus", "h100", "--prune-nvidia-libs", "--keep-ptx=false",
			"--compression", "zstd", "--startup-list", filepath.Join(dir, "startup.txt"))
		strict.digest, strict.out = rep.Digest, out
		t.Logf("the suite's runtime-strict slim: %s in %s", rep.Digest, time.Since(start).Round(time.Second))
	})
	if strict.digest == "" {
		t.Fatal("the suite's runtime-strict slim failed (in the first test that made it)")
	}
	return "oci:" + filepath.Join(strict.dir, "image"), strict.digest, strict.out, filepath.Join(strict.dir, "startup.txt")
}

// slim runs `kiln slim SRC --to dest --weights-to oci:SCRATCH/weights:app
// --probe probe ARGS --json`, decodes its report into rep and returns it.
func (r slimRun) slim(t *testing.T, dest, probe string, rep any, args ...string) []byte {
	t.Helper()
	wdest := "oci:" + filepath.Join(r.scratch, "weights") + ":app"
	cmd := exec.Command(r.bin, append([]string{"slim", r.src, "--to", dest, "--weights-to", wdest,
		"--probe", probe, "--json", "--progress", "none"}, args...)...)
	cmd.Env = append(os.Environ(), "KILN_WORK_DIR="+r.scratch)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kiln slim %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(out, rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	return out
}

// analyzeCI checks `kiln analyze --ci testdata/rules/runtime.yaml` passes
// on the image slim pushed.
func (r slimRun) analyzeCI(t *testing.T, image string) {
	t.Helper()
	ci := exec.Command(r.bin, "analyze", image, "--ci", "../testdata/rules/runtime.yaml", "--progress", "none")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("kiln analyze --ci on the slim image: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "passed") {
		t.Errorf("analyze --ci: %s", out)
	}
}

// pruneLibsReport is what checkPruneLibs reads of kiln slim's report.
type pruneLibsReport struct {
	Before, After struct {
		CompressedSize int64 `json:"compressed_size"`
	}
	Digest string `json:"digest"`
	Prune  *struct {
		DroppedFiles int   `json:"dropped_files"`
		DroppedBytes int64 `json:"dropped_bytes"`
		Top          []struct {
			Path string `json:"path"`
		} `json:"top"`
	} `json:"prune"`
	Warnings []string `json:"warnings"`
}

// checkPruneLibs checks a runtime-strict slim of the app fixture
// (runtime + prune_libs: unreferenced; TestSlimAppFixtureGPUsNVIDIALibs
// runs it, with --gpus h100, which prunes GPU code inside the libraries
// kept and nothing else): the probe loaded libtorch_cuda (torch is Debian's CUDA 12.4
// build, linked BIND_NOW against cuBLAS, cuFFT, NCCL, cuDNN...), kiln
// analyze --ci passes, and what nothing links (NPP, nvJPEG, the toolkit's
// profiling libraries) is gone while every library libtorch_cuda links
// stays.
func (r slimRun) checkPruneLibs(t *testing.T, dest, out string, rep pruneLibsReport) {
	t.Helper()
	if rep.Prune == nil || rep.Prune.DroppedFiles == 0 {
		t.Fatalf("nothing pruned: %s", out)
	}
	var top []string
	for _, f := range rep.Prune.Top {
		top = append(top, f.Path)
	}
	dropped := strings.Join(top, " ")
	for _, kept := range []string{"libcublasLt.so", "libcublas.so", "libtorch_cuda", "libnccl.so", "libcudnn.so"} {
		if strings.Contains(dropped, kept) {
			t.Errorf("%s dropped, though libtorch_cuda links it: %v", kept, top)
		}
	}
	if !strings.Contains(dropped, "libnpp") {
		t.Errorf("NPP (linked by nothing) not among the largest dropped: %v", top)
	}
	for _, w := range rep.Warnings {
		if strings.Contains(w, "without --probe") {
			t.Errorf("probe warning although a probe ran: %s", w)
		}
	}
	ratio := float64(rep.Before.CompressedSize) / float64(rep.After.CompressedSize)
	t.Logf("compressed %d → %d bytes (%.2fx), prune dropped %d files %d bytes, %s", rep.Before.CompressedSize, rep.After.CompressedSize,
		ratio, rep.Prune.DroppedFiles, rep.Prune.DroppedBytes, rep.Digest)
	// The figure is measured (bench/slim.sh), not asserted beyond "smaller
	// than half": CUDA torch keeps what it links (about 2 GB).
	if ratio < 2 {
		t.Errorf("%.2fx smaller, want at least 2x", ratio)
	}
	r.analyzeCI(t, dest+"@"+rep.Digest)
}

// TestSlimAppFixture slims the realistic devel-based app image with the
// runtime policy and the weights moved out, runs `python3 -c 'import torch'`
// in the result through BuildKit (a real execution), and checks the result
// passes `kiln analyze --ci testdata/rules/runtime.yaml`. It writes zstd
// alone (--compression zstd): the default's gzip twin of 2.6 GB, pushed
// and staged beside it, cost CI 5 GB of disk at its peak for a path the
// slimcmd tests (TestSlimCommand: gzip under the tag, zstd under TAG-zstd)
// check on a small image; bench/slim.sh measures both encodings here.
func TestSlimAppFixture(t *testing.T) {
	testdaemon.PruneAfter(t, true)
	r := newSlimRun(t, "kiln-slim-it-")
	dest := registry() + "/kiln-slim-it/app:slim"

	probe := "python3 -c 'import torch'"
	var rep struct {
		Before, After struct {
			CompressedSize int64 `json:"compressed_size"`
		}
		DivertedFiles int    `json:"diverted_files"`
		Digest        string `json:"digest"`
		MaxLayerSize  int64  `json:"max_layer_size"`
		Layers        []struct {
			Name             string `json:"name"`
			UncompressedSize int64  `json:"uncompressed_size"`
			Files            int    `json:"files"`
			Blobs            []struct {
				Compression    string `json:"compression"`
				CompressedSize int64  `json:"compressed_size"`
			} `json:"blobs"`
		} `json:"layers"`
		Images []struct {
			Ref, Compression, Digest string
		} `json:"images"`
	}
	r.slim(t, dest, probe, &rep, "--compression", "zstd")
	if rep.DivertedFiles != 2 {
		t.Errorf("diverted %d files, want the fixture's safetensors file and the config.json beside it (the mount would hide it)", rep.DivertedFiles)
	}
	// The defaults: groups in stability order, each split under
	// --max-layer-size (512MiB) unless one file is larger.
	group := regexp.MustCompile(`^(os|cuda|python|app)(-[0-9]+)?$`)
	order := map[string]int{"os": 0, "cuda": 1, "python": 2, "app": 3}
	var names []string
	last := 0
	sizes := map[string]int64{}
	for _, l := range rep.Layers {
		names = append(names, l.Name)
		m := group.FindStringSubmatch(l.Name)
		if m == nil || order[m[1]] < last {
			t.Errorf("layer %s out of place", l.Name)
			continue
		}
		last = order[m[1]]
		// Directories ride along uncounted: allow a few MB over.
		if l.UncompressedSize > rep.MaxLayerSize+4<<20 && l.Files > 1 {
			t.Errorf("layer %s: %d bytes of tar, over the %d cap with %d files", l.Name, l.UncompressedSize, rep.MaxLayerSize, l.Files)
		}
		for _, b := range l.Blobs {
			sizes[b.Compression] += b.CompressedSize
		}
	}
	if rep.MaxLayerSize != 512<<20 || len(rep.Layers) <= 4 {
		t.Errorf("max layer size %d, layers %s: the realistic image should split", rep.MaxLayerSize, strings.Join(names, ","))
	}
	if len(rep.Images) != 1 || rep.Images[0].Ref != dest || rep.Images[0].Compression != "zstd" {
		t.Errorf("images %+v", rep.Images)
	}
	t.Logf("layers %s", strings.Join(names, ","))
	t.Logf("compressed %d → zstd %d (%.2fx), %s", rep.Before.CompressedSize, sizes["zstd"],
		float64(rep.Before.CompressedSize)/float64(sizes["zstd"]), rep.Digest)

	r.analyzeCI(t, dest+"@"+rep.Digest)
}
