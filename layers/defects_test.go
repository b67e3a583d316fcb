package layers_test

import (
	"context"
	"errors"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// sizeLie is a layer whose descriptor names another size.
type sizeLie struct {
	v1.Layer
	size int64
}

func (l sizeLie) Size() (int64, error) { return l.size, nil }

// F13: a descriptor that reuses another layer's digest with a false size is
// refused (never walked as verified). ggcr's remote layer looks the blob up
// by digest and so verifies the first descriptor's size, not this one's.
func TestDuplicateDigestFalseSize(t *testing.T) {
	tarb := testimage.Tar(t, []testimage.Entry{testimage.Sized("a", 3000)})
	good := testimage.RawLayer(tarb, types.OCIUncompressedLayer)
	for _, lie := range []int64{int64(len(tarb)) + 512, int64(len(tarb)) - 512} {
		img := testimage.Image(t, testimage.Config{}, good, sizeLie{good, lie})
		ref := testimage.Registry(t) + "/hostile/dup:x"
		testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, good)) // the blob, uploaded honestly
		testimage.Push(t, ref, img)
		for _, r := range []string{ref} {
			lim, err := layers.Open(context.Background(), r)
			if err == nil {
				for _, l := range lim.Layers {
					st, werr := l.Walk(context.Background(), layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return nil })
					if werr != nil {
						err = werr
						break
					}
					if l.Index == 1 && st.Verified {
						t.Errorf("%s: layer 1 with a false size (%d) walked as verified", r, lie)
					}
				}
				lim.Close()
			}
			if !errors.Is(err, layers.ErrSizeMismatch) {
				t.Errorf("%s (size %d): err = %v, want a size mismatch", r, lie, err)
			}
		}
	}
}
