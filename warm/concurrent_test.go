package warm_test

import (
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
)

// twoImages pushes two images that share the fixture's slow large layer,
// so two warms of them overlap on it.
func TestWarmConcurrentOCILayout(t *testing.T) {
	f, refs := warmtest.TwoImages(t)
	dir := filepath.Join(t.TempDir(), "oci")
	warmtest.WarmBoth(t, refs, func() warm.Target {
		tgt, err := ocilayout.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		return tgt
	})
	l, _ := ocilayout.New(dir)
	names, err := l.ExistingImages()
	if err != nil || len(names) != 2 {
		t.Fatalf("index.json names %v (%v), want both images", names, err)
	}
	if got := f.Reg.Served(f.Big); got != f.Size {
		t.Errorf("shared layer: served %d bytes, want it fetched once (%d)", got, f.Size)
	}
}
