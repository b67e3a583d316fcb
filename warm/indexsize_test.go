package warm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
)

// D12: an index whose descriptor of the platform's manifest claims 100
// bytes more (or less) than the manifest has is refused: the digest
// matches, but a descriptor is digest AND size, and containerd's pull of
// the same index fails on it.
func TestResolveRefusesIndexDescriptorSizeLie(t *testing.T) {
	ctx := context.Background()
	reg := warmtest.NewRegistry(t)
	img := testimage.Image(t, testimage.Config{}, warmtest.RandomLayer(t, "a.bin", 3000, 12))
	for _, lie := range []int64{100, -100} {
		ref := reg.Host + "/hostile/idx:lie"
		testimage.PushIndexSizeLie(t, ref, img, warmtest.AMD64, lie)
		_, err := warm.Resolve(ctx, []string{ref}, warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()})
		if !errors.Is(err, layers.ErrSizeMismatch) {
			t.Errorf("index lists the manifest %+d bytes off: err = %v, want a size mismatch", lie, err)
		}
	}
}
