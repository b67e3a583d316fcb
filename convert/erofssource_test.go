package convert

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// TestConvertRefusesErofsLayers: an image of native EROFS layers (what
// kiln convert --format erofs and containerd's converter write) holds
// filesystem images, not tars. Recompressing one passed it off as a zstd
// tar layer (a regression test: kiln convert wrote such a broken image
// and reported success); now each conversion refuses it, naming the tar
// form to convert instead.
func TestConvertRefusesErofsLayers(t *testing.T) {
	ctx := context.Background()
	fsImage := append([]byte("\xe2\xe1\xf5\xe0"), make([]byte, 8188)...)
	img := testimage.Image(t, testimage.Config{}, testimage.RawLayer(fsImage, "application/vnd.erofs.layer.v1"))
	res, err := ToZstd(ctx, img, Options{TempDir: t.TempDir()})
	if err == nil {
		res.Close()
		t.Fatal("ToZstd recompressed a native EROFS layer as if it were a tar")
	}
	if !strings.Contains(err.Error(), "native EROFS layer") || !strings.Contains(err.Error(), "-zstd") {
		t.Errorf("ToZstd: %v", err)
	}
	if res, err := ToEStargz(ctx, img, Options{TempDir: t.TempDir()}, nil); err == nil || !strings.Contains(err.Error(), "native EROFS layer") {
		if res != nil {
			res.Close()
		}
		t.Errorf("ToEStargz: %v", err)
	}
}
