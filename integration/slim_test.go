//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildKiln compiles the CLI once for a test.
func buildKiln(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "kiln")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/kiln")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSlimAppFixturePruneLibs slims the app fixture with runtime-strict
// (runtime + prune_libs: unreferenced): the probe imports torch and
// computes with it, kiln analyze --ci passes, and the CUDA libraries nothing
// links are gone. The fixture's python3-torch is Debian's CPU-only build:
// it links no CUDA library, so they are all unreferenced here.
func TestSlimAppFixturePruneLibs(t *testing.T) {
	dir, e := fixtures(t)
	if os.Getenv("BUILDKIT_HOST") == "" {
		if os.Getenv("KILN_REQUIRE_FIXTURES") == "1" {
			t.Fatal(`BUILDKIT_HOST unset: eval "$(bash scripts/buildkitd.sh env)"`)
		}
		t.Skip(`no BuildKit (eval "$(bash scripts/buildkitd.sh env)")`)
	}
	scratch, err := os.MkdirTemp(os.Getenv("KILN_WORK_DIR"), "kiln-slim-prune-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(scratch) })
	bin := buildKiln(t, scratch)
	src := appRefs(dir, e)["oci"]
	dest := registry() + "/kiln-slim-it/app:strict"
	wdest := "oci:" + filepath.Join(scratch, "weights") + ":app"
	// LD_LIBRARY_PATH: the fixture's libGL workaround (see TestSlimAppFixture).
	probe := "LD_LIBRARY_PATH=/usr/lib/mesa-diverted/x86_64-linux-gnu python3 -c 'import torch; assert torch.ones(2).sum().item() == 2'"
	cmd := exec.Command(bin, "slim", src, "--to", dest, "--policy", "runtime-strict", "--weights-to", wdest,
		"--probe", probe, "--json", "--progress", "none")
	cmd.Env = append(os.Environ(), "KILN_WORK_DIR="+scratch)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kiln slim --policy runtime-strict: %v\n%s", err, stderr.String())
	}
	var rep struct {
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
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.Prune == nil || rep.Prune.DroppedFiles == 0 {
		t.Fatalf("nothing pruned: %s", out)
	}
	var top []string
	for _, f := range rep.Prune.Top {
		top = append(top, f.Path)
	}
	if !strings.Contains(strings.Join(top, " "), "libcublasLt.so") {
		t.Errorf("libcublasLt (unreferenced by a CPU-only torch) not among the largest dropped: %v", top)
	}
	for _, w := range rep.Warnings {
		if strings.Contains(w, "without --probe") {
			t.Errorf("probe warning although a probe ran: %s", w)
		}
	}
	ratio := float64(rep.Before.CompressedSize) / float64(rep.After.CompressedSize)
	t.Logf("compressed %d → %d bytes (%.2fx), prune dropped %d files %d bytes, %s", rep.Before.CompressedSize, rep.After.CompressedSize,
		ratio, rep.Prune.DroppedFiles, rep.Prune.DroppedBytes, rep.Digest)
	if ratio < 3 {
		t.Errorf("%.2fx smaller, the issue asks for at least 3x", ratio)
	}
	ci := exec.Command(bin, "analyze", dest+"@"+rep.Digest, "--ci", "../testdata/rules/runtime.yaml", "--progress", "none")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("kiln analyze --ci on the slim image: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "passed") {
		t.Errorf("analyze --ci: %s", out)
	}
}

// TestSlimAppFixture slims the realistic devel-based app image with the
// runtime policy and the weights moved out, runs `python3 -c 'import torch'`
// in the result through BuildKit (a real execution), and checks the result
// passes `kiln analyze --ci testdata/rules/runtime.yaml`.
func TestSlimAppFixture(t *testing.T) {
	dir, e := fixtures(t)
	if os.Getenv("BUILDKIT_HOST") == "" {
		if os.Getenv("KILN_REQUIRE_FIXTURES") == "1" {
			t.Fatal(`BUILDKIT_HOST unset: eval "$(bash scripts/buildkitd.sh env)"`)
		}
		t.Skip(`no BuildKit (eval "$(bash scripts/buildkitd.sh env)")`)
	}
	// The rewrite writes ~2.5 GB of scratch: keep it off a small /tmp.
	scratch, err := os.MkdirTemp(os.Getenv("KILN_WORK_DIR"), "kiln-slim-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(scratch) })
	bin := buildKiln(t, scratch)
	src := appRefs(dir, e)["oci"]
	dest := registry() + "/kiln-slim-it/app:slim"
	wdest := "oci:" + filepath.Join(scratch, "weights") + ":app"

	// The fixture's python3-torch needs libGL.so.1, which its mesa package
	// installed under /usr/lib/mesa-diverted without the alternatives
	// symlinks (maintainer scripts did not run): `import torch` fails in the
	// source image exactly as in the slim one. The probe points the loader
	// there, so it tests what slim changed, not the fixture's defect.
	probe := "LD_LIBRARY_PATH=/usr/lib/mesa-diverted/x86_64-linux-gnu python3 -c 'import torch'"
	cmd := exec.Command(bin, "slim", src, "--to", dest, "--weights-to", wdest,
		"--probe", probe, "--json", "--progress", "none")
	cmd.Env = append(os.Environ(), "KILN_WORK_DIR="+scratch)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kiln slim: %v\n%s", err, stderr.String())
	}
	var rep struct {
		Before, After struct {
			CompressedSize int64 `json:"compressed_size"`
		}
		DivertedFiles int    `json:"diverted_files"`
		Digest        string `json:"digest"`
		Layers        []struct {
			Name string `json:"name"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.DivertedFiles != 1 {
		t.Errorf("diverted %d files, want the fixture's one safetensors file", rep.DivertedFiles)
	}
	var names []string
	for _, l := range rep.Layers {
		names = append(names, l.Name)
	}
	if got := strings.Join(names, ","); got != "os,cuda,python,app" {
		t.Errorf("layers %s", got)
	}
	t.Logf("compressed %d → %d bytes (%.2fx), %s", rep.Before.CompressedSize, rep.After.CompressedSize,
		float64(rep.Before.CompressedSize)/float64(rep.After.CompressedSize), rep.Digest)

	ci := exec.Command(bin, "analyze", dest+"@"+rep.Digest, "--ci", "../testdata/rules/runtime.yaml", "--progress", "none")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("kiln analyze --ci on the slim image: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "passed") {
		t.Errorf("analyze --ci: %s", out)
	}
}
