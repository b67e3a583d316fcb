package analyze_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/registry"
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
	w := class(r, classify.ClassWeights)
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
		if !classify.WeightCandidate(c.p, c.size) {
			t.Errorf("WeightCandidate(%q, %d) = false", c.p, c.size)
		}
	}
}

// F13: an image whose second layer reuses the first one's digest with a
// false size is never reported verified: it does not open.
func TestAnalyzeRefusesDuplicateDigestFalseSize(t *testing.T) {
	good := testimage.RawLayer(testimage.Tar(t, []testimage.Entry{testimage.Sized("a", 3000)}), types.OCIUncompressedLayer)
	ref := testimage.Registry(t) + "/hostile/dup:x"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, good))
	n, _ := good.Size()
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, good, testimage.SizeLie(good, n+512)))
	img, err := testkit.OpenImage(context.Background(), ref)
	if err == nil {
		defer img.Close()
		var rep *analyze.Report
		if rep, err = analyze.Image(context.Background(), img, analyze.Options{}); err == nil {
			t.Fatalf("analyzed: verified %v", rep.Verified)
		}
	}
	if !errors.Is(err, registry.ErrSizeMismatch) {
		t.Errorf("err = %v, want a size mismatch", err)
	}
}
