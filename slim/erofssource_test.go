package slim

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// TestSlimRefusesErofsLayers (issue 34): kiln's own TAG-erofs read as a
// tar looked empty (its first KiB is zeros, an end marker), and slim
// wrote an image with no layers and exited 0; now the media type decides
// and slim refuses, naming the image to slim instead.
func TestSlimRefusesErofsLayers(t *testing.T) {
	fsImage := append(append(make([]byte, 1024), "\xe2\xe1\xf5\xe0"...), make([]byte, 7164)...)
	src := openLayout(t, testimage.Image(t, testimage.Config{}, testimage.RawLayer(fsImage, "application/vnd.erofs.layer.v1")))
	res, err := Rewrite(context.Background(), src, Options{Policy: runtimePolicy(t), WorkDir: t.TempDir()})
	if err == nil {
		t.Fatalf("slimmed an EROFS image: %+v", res)
	}
	for _, want := range []string{"layer 0", "is an EROFS layer", "slim the image it was converted from"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to mention %q", err, want)
		}
	}
}
