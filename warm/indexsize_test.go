package warm

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

type rawIndex []byte

func (r rawIndex) RawManifest() ([]byte, error)        { return r, nil }
func (r rawIndex) MediaType() (types.MediaType, error) { return types.OCIImageIndex, nil }

// D12: an index whose descriptor of the platform's manifest claims 100
// bytes more (or less) than the manifest has is refused: the digest
// matches, but a descriptor is digest AND size, and containerd's pull of
// the same index fails on it.
func TestResolveRefusesIndexDescriptorSizeLie(t *testing.T) {
	ctx := context.Background()
	reg := newTestRegistry(t)
	img := testimage.Image(t, testimage.Config{}, randomLayer(t, "a.bin", 3000, 12))
	testimage.Push(t, reg.Host+"/hostile/idx:child", img)
	raw, _ := img.RawManifest()
	d, _ := img.Digest()
	mt, _ := img.MediaType()
	for _, lie := range []int64{100, -100} {
		idx, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
			MediaType: mt, Digest: d, Size: int64(len(raw)) + lie, Platform: &amd64,
		}}})
		tag, _ := name.NewTag(reg.Host+"/hostile/idx:lie", name.Insecure)
		if err := remote.Put(tag, rawIndex(idx)); err != nil {
			t.Fatal(err)
		}
		_, err := Resolve(ctx, []string{tag.String()}, ResolveOptions{Platform: amd64, Blobs: fastSource()})
		if !errors.Is(err, layers.ErrSizeMismatch) {
			t.Errorf("index lists the manifest %+d bytes off: err = %v, want a size mismatch", lie, err)
		}
	}
}
