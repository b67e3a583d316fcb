package layers

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// TestLayoutManyLayersFewFiles: an OCI layout image of 1500 layers opens
// and walks under a 256-descriptor limit: layer files are opened when read,
// a bounded number at once, not all at Open (F12).
func TestLayoutManyLayersFewFiles(t *testing.T) {
	const n = 1500
	dir := filepath.Join(t.TempDir(), "layout")
	testimage.WriteTarLayout(t, dir, "many", testimage.OneFileTars(t, n, "f/%d"))
	testimage.LimitOpenFiles(t, 256)

	img, err := Open(context.Background(), LayoutRef(dir, "many"))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer img.Close()
	if len(img.Layers) != n {
		t.Fatalf("%d layers, want %d", len(img.Layers), n)
	}
	files := 0
	for _, l := range img.Layers {
		// Uncompressed: walked by seeking while a second reader hashes
		// the same file.
		st, err := l.Walk(context.Background(), WalkOptions{}, func(e *Entry, body io.Reader) error {
			files++
			return nil
		})
		if err != nil || !st.Verified {
			t.Fatalf("walk: verified=%v %v", st.Verified, err)
		}
	}
	if files < n {
		t.Fatalf("walked %d entries, want at least %d", files, n)
	}
}
