package layers

import (
	"context"
	"errors"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/registry"
)

// D12: an index listing its platform's manifest with a false size (the
// right digest) is refused by analyze/slim's Open as by warm.
func TestOpenRefusesIndexDescriptorSizeLie(t *testing.T) {
	host := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("a", []byte("a"))}, "gzip"))
	cf, _ := img.ConfigFile()
	p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture}
	ref := host + "/hostile/idx:lie"
	testimage.PushIndexSizeLie(t, ref, img, p, 100)
	r, err := ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), r, WithPlatform(p))
	if !errors.Is(err, registry.ErrSizeMismatch) {
		t.Errorf("err = %v, want a size mismatch", err)
	}
}
