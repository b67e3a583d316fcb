package layers_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// TestWriteRoundTrip writes one image to each kind of destination and reads
// it back through Open: the manifest digest and every file must survive.
func TestWriteRoundTrip(t *testing.T) {
	ctx := context.Background()
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("alpha"))}, "zstd"),
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/b", []byte("beta"))}, "gzip"))
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg := testimage.Registry(t)
	for _, dest := range []string{
		reg + "/kiln/write:v1",
		"oci:" + filepath.Join(dir, "layout") + ":v1",
		"docker-archive:" + filepath.Join(dir, "img.tar") + ":kiln/write:v1",
	} {
		t.Run(dest[:3], func(t *testing.T) {
			got, err := layers.Write(ctx, img, dest)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("Write returned %s, want %s", got, want)
			}
			back, err := layers.Open(ctx, dest)
			if err != nil {
				t.Fatal(err)
			}
			defer back.Close()
			n := 0
			for _, l := range back.Layers {
				if _, err := l.Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, body io.Reader) error {
					n++
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if n != 2 {
				t.Fatalf("read back %d files, want 2", n)
			}
		})
	}
	// A second image under the same layout tag replaces the first.
	other := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("etc/c", []byte("gamma"))}, "gzip"))
	lay := "oci:" + filepath.Join(dir, "layout") + ":v1"
	if _, err := layers.Write(ctx, other, lay); err != nil {
		t.Fatal(err)
	}
	idx, err := os.ReadFile(filepath.Join(dir, "layout", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	od, _ := other.Digest()
	if !strings.Contains(string(idx), od.String()) || strings.Contains(string(idx), want.String()) {
		t.Fatalf("layout index after replace:\n%s", idx)
	}
	// No temporary archive is left beside the output.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".tmp" {
			t.Fatalf("leftover %s", e.Name())
		}
	}
}
