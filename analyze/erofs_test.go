package analyze_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/internal/testimage"
)

// erofsBlob is the start of a native EROFS layer: 1 KiB of zeros (which a
// tar reader takes for an end marker, an empty layer) and the superblock.
func erofsBlob() []byte {
	return append(append(make([]byte, 1024), "\xe2\xe1\xf5\xe0"...), make([]byte, 7164)...)
}

// TestAnalyzeRefusesErofsLayers (issue 34): the media type decides how a
// layer is read. An EROFS layer read as a tar looked empty, and analyze
// reported 0 files, verified; now it is unsupported, in words.
func TestAnalyzeRefusesErofsLayers(t *testing.T) {
	dir := t.TempDir()
	testimage.WriteLayout(t, dir, "x", testimage.Image(t, testimage.Config{}, testimage.RawLayer(erofsBlob(), "application/vnd.erofs.layer.v1")))
	img, err := testkit.OpenImage(context.Background(), "oci:"+dir+":x")
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	rep, err := analyze.Image(context.Background(), img, analyze.Options{})
	if err == nil {
		t.Fatalf("analyzed an EROFS layer as a tar: %d files, verified %v", rep.FileCount, rep.Verified)
	}
	for _, want := range []string{"layer 0", "is an EROFS layer", "kiln analyze does not support EROFS layers", "analyze the image it was converted from"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to mention %q", err, want)
		}
	}
}
