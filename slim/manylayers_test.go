package slim

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testimage"
)

// TestRewriteManyLayersFewFiles: slimming an image of many layers (600;
// the report had 1500) with one job at a time under a 128-descriptor limit
// works: the per-layer segments of an output layer are opened one after
// another, not all at once (F12).
func TestRewriteManyLayersFewFiles(t *testing.T) {
	const n = 600
	dir := filepath.Join(t.TempDir(), "src")
	testimage.WriteTarLayout(t, dir, "src", testimage.OneFileTars(t, n, "app/f%d"))
	testimage.LimitOpenFiles(t, 128)
	src, err := testkit.OpenImage(context.Background(), "oci:"+dir+":src")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	res := rewrite(t, src, Options{Policy: runtimePolicy(t), Concurrency: 1})
	files := 0
	for _, l := range res.Report.Layers {
		files += l.Files
	}
	if files != n {
		t.Fatalf("slim image has %d files, want %d", files, n)
	}
}
