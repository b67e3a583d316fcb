package layers

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
)

type rawIndex []byte

func (r rawIndex) RawManifest() ([]byte, error)        { return r, nil }
func (r rawIndex) MediaType() (types.MediaType, error) { return types.OCIImageIndex, nil }

// D12: an index listing its platform's manifest with a false size (the
// right digest) is refused by analyze/slim's Open as by warm.
func TestOpenRefusesIndexDescriptorSizeLie(t *testing.T) {
	host := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("a", []byte("a"))}, "gzip"))
	testimage.Push(t, host+"/hostile/idx:child", img)
	raw, _ := img.RawManifest()
	d, _ := img.Digest()
	mt, _ := img.MediaType()
	cf, _ := img.ConfigFile()
	p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture}
	idx, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: mt, Digest: d, Size: int64(len(raw)) + 100, Platform: &p,
	}}})
	tag, _ := name.NewTag(host+"/hostile/idx:lie", name.Insecure)
	if err := remote.Put(tag, rawIndex(idx)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), tag.String(), WithPlatform(p))
	if !errors.Is(err, ErrSizeMismatch) {
		t.Errorf("err = %v, want a size mismatch", err)
	}
}
