package layers_test

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	kreg "github.com/kiln-build/kiln/registry"
)

// Walk is the one walk below a root: an index's manifests for the
// platform, each read through the registry's manifests endpoint and
// verified, handed to the Chooser (kiln warm's picks zstd over gzip);
// without one the first (what a pull installs); an index nested in an
// index without a platform is descended. The config comes from the
// manifest picked.
func TestWalkChooserAndNestedIndex(t *testing.T) {
	ctx := context.Background()
	host := testimage.Registry(t)
	amd := v1.Platform{OS: "linux", Architecture: "amd64"}
	first := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	second := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "zstd"))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: first, Descriptor: v1.Descriptor{Platform: &amd}},
		mutate.IndexAddendum{Add: second, Descriptor: v1.Descriptor{Platform: &amd}})
	outer := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: idx})
	for tag, ii := range map[string]v1.ImageIndex{"flat": idx, "nested": outer} {
		ref, _ := name.ParseReference(host + "/team/app:" + tag)
		if err := remote.WriteIndex(ref, ii); err != nil {
			t.Fatal(err)
		}
	}
	d1, _ := first.Digest()
	d2, _ := second.Digest()
	c2, _ := second.ConfigName()

	pool := kreg.NewPool(nil)
	for _, tag := range []string{"flat", "nested"} {
		r, err := layers.ParseRef(host + "/team/app:" + tag)
		if err != nil {
			t.Fatal(err)
		}
		c, err := pool.Repo(ctx, r.Name.Context())
		if err != nil {
			t.Fatal(err)
		}
		raw, desc, err := c.Manifest(ctx, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		root := layers.Raw{Desc: desc, Bytes: raw}
		rt, err := layers.Walk(ctx, r, c, root, amd, nil)
		if err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		if rt.Manifest.Desc.Digest != d1 || rt.Note != "" || rt.Index == nil || rt.Index.Desc.Digest != desc.Digest {
			t.Errorf("%s without a chooser: manifest %s (want the first, %s), note %q, index %+v", tag, rt.Manifest.Desc.Digest, d1, rt.Note, rt.Index)
		}
		var seen int
		rt, err = layers.Walk(ctx, r, c, root, amd, func(_ context.Context, _ blob.Source, cands []layers.Raw) (int, string) {
			seen = len(cands)
			return 1, "took the second"
		})
		if err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		if seen != 2 || rt.Manifest.Desc.Digest != d2 || rt.Config.Desc.Digest != c2 || rt.Note != "took the second" {
			t.Errorf("%s with a chooser: %d candidates, manifest %s (want %s), config %s (want %s), note %q", tag, seen, rt.Manifest.Desc.Digest, d2, rt.Config.Desc.Digest, c2, rt.Note)
		}
		if rt.Manifest.Desc.Platform == nil || rt.Manifest.Desc.Platform.Architecture != "amd64" {
			t.Errorf("%s: the manifest's descriptor lost the index's platform: %+v", tag, rt.Manifest.Desc)
		}
	}
}
