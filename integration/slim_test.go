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
