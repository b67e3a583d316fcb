package analyze_test

import (
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/internal/testimage"
)

// Weights renamed without an extension are found by their content at any
// size, not only from 16 MiB: a 5 MiB safetensors and a 2 MiB GGUF.
func TestSniffSmallExtensionlessWeights(t *testing.T) {
	gguf := make([]byte, 2<<20)
	copy(gguf, "GGUF\x03\x00\x00\x00")
	st := safetensors(5 << 20)
	plain := make([]byte, 3<<20) // not weights: zeros
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{
		testimage.File("srv/model", st),
		testimage.File("srv/q4", gguf),
		testimage.File("srv/blob", plain),
		testimage.File("srv/NOTES", append([]byte("GGUF models are quantised; see below.\n"), make([]byte, 4000)...)),
	}, "gzip"))
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "x", img)
	r := openAndAnalyze(t, "oci:"+filepath.Join(dir))
	w := class(r, analyze.ClassWeights)
	got := map[string]string{}
	for _, f := range w.Top {
		got[f.Path] = f.Format
	}
	if got["/srv/model"] != "safetensors" || got["/srv/q4"] != "gguf" || len(got) != 2 {
		t.Errorf("weights found: %v, want /srv/model (safetensors) and /srv/q4 (gguf) only", got)
	}
	if n := int64(len(st) + len(gguf)); w.Bytes != n {
		t.Errorf("weights bytes %d, want %d", w.Bytes, n)
	}
	for _, c := range []struct {
		p    string
		size int64
	}{{"srv/model", 5 << 20}, {"srv/q4", 2 << 20}} {
		if !analyze.WeightCandidate(c.p, c.size) {
			t.Errorf("WeightCandidate(%q, %d) = false", c.p, c.size)
		}
	}
}
