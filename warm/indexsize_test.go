package warm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/registry"
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
		_, err := warm.Resolve(ctx, testkit.Refs(t, ref), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()})
		if !errors.Is(err, registry.ErrSizeMismatch) {
			t.Errorf("index lists the manifest %+d bytes off: err = %v, want a size mismatch", lie, err)
		}
	}
}

// An index that wraps the platform's index in another (no platform on
// the inner one): layers.Walk descends it, but a store records the blobs
// the set carries, and the inner index is not one of them; warm refuses
// in words instead of recording an image whose index it lacks.
func TestResolveRefusesNestedIndex(t *testing.T) {
	ctx := context.Background()
	reg := warmtest.NewRegistry(t)
	img := testimage.Image(t, testimage.Config{}, warmtest.RandomLayer(t, "a.bin", 3000, 12))
	amd := warmtest.AMD64
	inner := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &amd}})
	outer := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: inner})
	ref := reg.Host + "/team/nested:v1"
	r, _ := name.ParseReference(ref)
	if err := remote.WriteIndex(r, outer); err != nil {
		t.Fatal(err)
	}
	_, err := warm.Resolve(ctx, testkit.Refs(t, ref), warm.ResolveOptions{Platform: amd, Blobs: warmtest.FastSource()})
	if err == nil || !strings.Contains(err.Error(), "nests another index") {
		t.Fatalf("a nested index: err = %v, want a refusal in words", err)
	}
}
