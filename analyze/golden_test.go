package analyze_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/internal/testimage"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestReportGolden pins the --json schema (docs/analyze-json.md) on a
// deterministic image: uncompressed layers with fixed timestamps, so every
// digest is stable. Regenerate with go test ./analyze -run Golden -update.
func TestReportGolden(t *testing.T) {
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "app", cudaImage(t, "none"))
	gpus, err := analyze.ParseGPUTargets([]string{"h100"})
	if err != nil {
		t.Fatal(err)
	}
	r := openAndAnalyze(t, "oci:"+dir+":app", analyze.Options{GPUs: gpus})
	r.Image = "oci:LAYOUT:app" // the temp dir differs per run
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("..", "testdata", "analyze", "cuda-image.golden.json")
	if *update {
		os.MkdirAll(filepath.Dir(golden), 0o755)
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("report differs from %s at line %d:\n got: %s\nwant: %s\n(run with -update if the change is intended, and document it)", golden, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("report differs from %s in length (%d vs %d lines)", golden, len(gl), len(wl))
	}
}
