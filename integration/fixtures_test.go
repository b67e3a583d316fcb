//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testkit"
)

type pathBytes struct {
	Path       string `json:"path"`
	Bytes      int64  `json:"bytes"`
	LayerIndex int    `json:"layer_index"`
}

type aggregate struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// expected mirrors the parts of fixtures/expected.json the tests use.
type expected struct {
	Images map[string]struct {
		OCIRef      string `json:"oci_ref"`
		RegistryRef string `json:"registry_ref"`
		Archive     string `json:"archive"`
		LayerCount  int    `json:"layer_count"`
		Layers      []struct {
			DiffID           string `json:"diff_id"`
			UncompressedSize int64  `json:"uncompressed_size"`
			RegularFiles     int    `json:"regular_files"`
		} `json:"layers"`
	} `json:"images"`
	App struct {
		Weights  pathBytes `json:"weights"`
		PipCache struct {
			LayerIndex int `json:"layer_index"`
			aggregate
		} `json:"pip_cache"`
		Nvcc        []pathBytes `json:"nvcc"`
		StaticLibs  aggregate   `json:"static_libs"`
		CUDAHeaders struct {
			LayerIndex int `json:"layer_index"`
			aggregate
		} `json:"cuda_headers"`
		Apt struct {
			LayerIndex   int       `json:"layer_index"`
			Lists        aggregate `json:"lists"`
			Archives     aggregate `json:"archives"`
			DeletedBytes int64     `json:"deleted_bytes"`
			DeletedBy    int       `json:"deleted_by_layer_index"`
		} `json:"apt_in_torch_layer"`
	} `json:"app"`
}

func fixtures(t *testing.T) (string, *expected) {
	t.Helper()
	dir := testkit.FixturesDir()
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		if os.Getenv("KILN_REQUIRE_FIXTURES") == "1" {
			t.Fatalf("fixtures required: %v (run make fixtures)", err)
		}
		t.Skipf("no fixtures (%v); run make fixtures", err)
	}
	var e expected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return dir, &e
}

// needFixtures skips t for why, or fails it with KILN_REQUIRE_FIXTURES=1.
func needFixtures(t *testing.T, why string) {
	t.Helper()
	testkit.Need(t, why, "KILN_REQUIRE_FIXTURES")
}

// needRoot is the prologue of the tests that start containerd on the
// fixtures: it skips t (fails it with KILN_REQUIRE_FIXTURES=1) unless t
// runs as root with bins on PATH.
func needRoot(t *testing.T, bins ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		needFixtures(t, "containerd needs root")
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			needFixtures(t, "no "+b)
		}
	}
}

// needCUDARuntime skips t (fails it with KILN_REQUIRE_FIXTURES=1) unless
// the registry reg holds the CUDA 12.4 runtime image scripts/fixtures.sh
// pushes, and returns its reference.
func needCUDARuntime(t *testing.T, reg string) string {
	t.Helper()
	ref := reg + "/nvidia/cuda:12.4.1-runtime-debian13"
	req, _ := http.NewRequest(http.MethodHead, "http://"+reg+"/v2/nvidia/cuda/manifests/12.4.1-runtime-debian13", nil)
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		needFixtures(t, fmt.Sprintf("no %s in the local registry (%v %v)", ref, resp, err))
	} else {
		resp.Body.Close()
	}
	return ref
}

func registry() string {
	if r := os.Getenv("KILN_REGISTRY"); r != "" {
		return r
	}
	return "127.0.0.1:5000"
}

func classOf(r *analyze.Report, c classify.Class) analyze.ClassReport {
	for _, cr := range r.Classes {
		if cr.Class == c {
			return cr
		}
	}
	return analyze.ClassReport{}
}

// appRefs names the naive app image in all three sources.
func appRefs(dir string, e *expected) map[string]string {
	app := e.Images["app"]
	ociRef := "oci:" + filepath.Join(dir, "oci") + ":app"
	return map[string]string{
		"oci":            ociRef,
		"registry":       registry() + "/" + app.RegistryRef,
		"docker-archive": "docker-archive:" + filepath.Join(dir, app.Archive),
	}
}

// The docker-archive (docker save's uncompressed layers, 8.2 GB) is the one
// fixture that cannot share the blob cache's files, so scripts/fixtures.sh
// writes it on demand: the first test that reads it has it written, and
// with KILN_PRUNE_AFTER_TESTS=1 it goes when the suite ends.
var appArchive struct {
	once sync.Once
	path string
	made bool
	err  error
}

// needAppArchive makes sure the app's docker-archive exists.
func needAppArchive(t *testing.T, dir string, e *expected) {
	t.Helper()
	appArchive.once.Do(func() {
		appArchive.path = filepath.Join(dir, e.Images["app"].Archive)
		if _, err := os.Stat(appArchive.path); err == nil {
			return
		}
		script, err := testdaemon.RepoFile("scripts/fixtures.sh")
		if err != nil {
			appArchive.err = err
			return
		}
		t0 := time.Now()
		out, err := exec.Command("bash", script, "archive").CombinedOutput()
		if err != nil {
			appArchive.err = fmt.Errorf("scripts/fixtures.sh archive: %v\n%s", err, out)
			return
		}
		appArchive.made = true
		t.Logf("wrote %s on demand in %s", appArchive.path, time.Since(t0).Round(time.Second))
	})
	if appArchive.err != nil {
		t.Fatal(appArchive.err)
	}
}

// dropAppArchive removes the app's docker-archive when a test wrote it on
// demand and the suite drops what it made (KILN_PRUNE_AFTER_TESTS=1): 7.4
// GB that would otherwise sit on the disk through every later test (the
// largest thing in CI's disk peak once).
func dropAppArchive() {
	if appArchive.made && os.Getenv("KILN_PRUNE_AFTER_TESTS") == "1" {
		os.Remove(appArchive.path)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	testdaemon.RemoveKilnBinary()
	if strict.dir != "" {
		os.RemoveAll(strict.dir)
	}
	dropAppArchive()
	os.Exit(code)
}

func TestAnalyzeAppFixture(t *testing.T) {
	dir, e := fixtures(t)
	app := e.Images["app"]
	// The one test that reads the docker-archive: gone when it ends.
	needAppArchive(t, dir, e)
	t.Cleanup(dropAppArchive)
	for src, ref := range appRefs(dir, e) {
		t.Run(src, func(t *testing.T) {
			img, err := testkit.OpenImage(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			r, err := analyze.Image(context.Background(), img, analyze.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Verified {
				t.Error("digests not verified")
			}
			if len(r.Layers) != app.LayerCount {
				t.Fatalf("layers = %d, want %d", len(r.Layers), app.LayerCount)
			}
			for i, l := range r.Layers {
				if l.DiffID != app.Layers[i].DiffID || l.UncompressedSize != app.Layers[i].UncompressedSize {
					t.Errorf("layer %d: diff_id %s size %d, want %s %d", i, l.DiffID, l.UncompressedSize, app.Layers[i].DiffID, app.Layers[i].UncompressedSize)
				}
			}
			// Weights: one file, exact bytes, found by content.
			w := classOf(r, classify.ClassWeights)
			if w.Files != 1 || w.Bytes != e.App.Weights.Bytes || w.Top[0].Path != e.App.Weights.Path || w.Top[0].Format != "safetensors" || w.Top[0].Layer != e.App.Weights.LayerIndex {
				t.Errorf("weights = %d files %d bytes %+v; want %+v", w.Files, w.Bytes, w.Top, e.App.Weights)
			}
			// nvcc: every copy the fixture installed, with its size.
			dev := classOf(r, classify.ClassDevTools)
			for _, n := range e.App.Nvcc {
				if n.Bytes < 1<<20 {
					continue // the /usr/bin/nvcc wrapper script is below the top list
				}
				found := false
				for _, f := range dev.Top {
					if f.Path == n.Path && f.Size == n.Bytes && f.Layer == n.LayerIndex {
						found = true
					}
				}
				if !found {
					t.Errorf("dev_tools top misses %+v: %+v", n, dev.Top)
				}
			}
			// Static libraries: exact.
			st := classOf(r, classify.ClassStaticLibs)
			if st.Files != e.App.StaticLibs.Files || st.Bytes != e.App.StaticLibs.Bytes {
				t.Errorf("static_libs = %d files %d bytes, want %+v", st.Files, st.Bytes, e.App.StaticLibs)
			}
			// Headers: the CUDA headers are all there (kiln also counts the
			// other headers the toolkit's dependencies bring).
			if got := r.Layers[e.App.CUDAHeaders.LayerIndex].BytesByClass["headers"]; got < e.App.CUDAHeaders.Bytes {
				t.Errorf("headers in layer %d = %d, want >= %d", e.App.CUDAHeaders.LayerIndex, got, e.App.CUDAHeaders.Bytes)
			}
			// The pip cache layer holds nothing but the pip cache.
			if got := r.Layers[e.App.PipCache.LayerIndex].BytesByClass["caches"]; got != e.App.PipCache.Bytes {
				t.Errorf("pip cache bytes = %d, want %d", got, e.App.PipCache.Bytes)
			}
			// apt lists and archives in the torch layer; the lists are
			// deleted later, which makes them waste.
			al := e.App.Apt
			if got := r.Layers[al.LayerIndex].BytesByClass["caches"]; got < al.Lists.Bytes+al.Archives.Bytes {
				t.Errorf("caches in torch layer = %d, want >= %d", got, al.Lists.Bytes+al.Archives.Bytes)
			}
			if got := r.Layers[al.LayerIndex].WastedBytes; got < al.DeletedBytes {
				t.Errorf("torch layer wasted = %d, want >= %d deleted apt lists", got, al.DeletedBytes)
			}
			var deletedLists int64
			for _, f := range r.Waste.Top {
				if strings.HasPrefix(f.Path, "/var/lib/apt/lists/") && f.How == "deleted" && f.By == al.DeletedBy {
					deletedLists += f.Size
				}
			}
			if deletedLists == 0 {
				t.Errorf("waste top has no apt list deleted by layer %d: %+v", al.DeletedBy, r.Waste.Top)
			}
			if r.CUDA.CUDAVersion != "12.4.1" || r.CUDA.MinDriver == nil || !strings.Contains(r.CUDA.MinDriver.Toolkit, "550.54.15") {
				t.Errorf("cuda facts = %+v", r.CUDA)
			}
		})
	}
}

// TestRuntimeRulesFailTheApp runs the built binary the way CI users do: the
// naive app image breaks the runtime rules (exit 3), naming each class.
// One source is enough: the verdict is the report's, and the report is
// checked on every source by TestAnalyzeAppFixture (two more full
// analyses of 8 GB cost CI half a minute for nothing new).
func TestRuntimeRulesFailTheApp(t *testing.T) {
	dir, e := fixtures(t)
	bin := testdaemon.KilnBinary(t)
	for src, ref := range map[string]string{"oci": appRefs(dir, e)["oci"]} {
		cmd := exec.Command(bin, "analyze", "--json", "--progress", "none", "--ci", "../testdata/rules/runtime.yaml", ref)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("%s: exit = %v, want 3", src, err)
		}
		var rep struct {
			CI struct {
				Violations []struct{ Rule, Message string }
			}
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatal(err)
		}
		msgs := ""
		for _, v := range rep.CI.Violations {
			msgs += v.Rule + ": " + v.Message + "\n"
		}
		for _, want := range []string{"forbid: dev_tools", "forbid: headers", "forbid: static_libs", "forbid: weights", "forbid: caches", "max_wasted_bytes"} {
			if !strings.Contains(msgs, want) {
				t.Errorf("%s: violations lack %q:\n%s", src, want, msgs)
			}
		}
	}
}

// TestKernelCoverageOfCUDALibraries reads the fat binaries of the naive
// app image: Debian trixie's CUDA 12.4 libraries and its CUDA build of
// torch. libtorch_cuda carries SASS for sm_50 to sm_90 and PTX for
// compute_90, so an H100 runs it natively and Blackwell (B200 sm_100, RTX
// 5090 sm_120) only through PTX JIT.
func TestKernelCoverageOfCUDALibraries(t *testing.T) {
	dir, e := fixtures(t)
	// The OCI layout: the same image as the docker-archive
	// TestAnalyzeAppFixture reads (and removes when it ends).
	img, err := testkit.OpenImage(context.Background(), appRefs(dir, e)["oci"])
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	gpus, err := analyze.ParseGPUTargets([]string{"h100", "b200", "rtx5090"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := analyze.Image(context.Background(), img, analyze.Options{GPUs: gpus})
	if err != nil {
		t.Fatal(err)
	}
	k := r.Kernels
	find := func(name string) *analyze.KernelLib {
		for i := range k.Libraries {
			if strings.Contains(k.Libraries[i].Path, name) {
				return &k.Libraries[i]
			}
		}
		t.Fatalf("no %s among the libraries with device code: %+v", name, k.Libraries)
		return nil
	}
	tc := find("/libtorch_cuda.so.")
	if got := strings.Join(tc.SM, ","); got != "sm_50,sm_60,sm_70,sm_75,sm_80,sm_86,sm_90" || strings.Join(tc.PTX, ",") != "compute_90" {
		t.Errorf("libtorch_cuda: SASS %s PTX %v, want sm_50..sm_90 and compute_90", got, tc.PTX)
	}
	if lt := find("/libcublasLt.so."); !slicesContains(lt.SM, "sm_89") || !slicesContains(lt.PTX, "compute_90") {
		t.Errorf("libcublasLt kernels = %+v", lt)
	}
	in := func(list []string, p string) bool { return slicesContains(list, p) }
	for _, g := range k.GPUs {
		switch g.GPU {
		case "H100":
			if in(g.JIT, tc.Path) || in(g.Missing, tc.Path) {
				t.Errorf("H100: libtorch_cuda not native: %+v", g)
			}
		default: // Blackwell
			if !in(g.JIT, tc.Path) {
				t.Errorf("%s: libtorch_cuda not through PTX JIT: %+v", g.GPU, g)
			}
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
