package layers_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// FuzzWalkTar feeds arbitrary bytes (seeded with real, truncated and
// compressed layers) through decompression and the tar walker: any input
// must end in entries or an error, never a panic or a hang.
func FuzzWalkTar(f *testing.F) {
	tb := testimage.Tar(f, []testimage.Entry{
		testimage.Sized("usr/bin/nvcc", 3000), testimage.Whiteout("a/b"), testimage.Opaque("c"),
		testimage.Symlink("x", "../../y"), testimage.Sized("../evil", 10),
	})
	f.Add(tb)
	f.Add(tb[:700])
	f.Add(gz(tb))
	f.Add(zst(tb))
	f.Add(gz(tb)[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, _, closeDec, err := layers.Decompress(bytes.NewReader(b))
		if err != nil {
			return
		}
		defer closeDec()
		_ = layers.WalkTar(context.Background(), r, func(e *layers.Entry, body io.Reader) error {
			if e.Escapes && e.Path != "" && e.Path[0] == '/' {
				t.Fatalf("escaping entry kept a leading slash: %q", e.Path)
			}
			_, err := io.CopyN(io.Discard, body, 1<<20)
			if err == io.EOF {
				err = nil
			}
			return err
		})
	})
}
