package layers_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// A layout's manifest is read as its index.json descriptor names it:
// digest and size (blob.ReadVerified, the one guard of every layout
// reader). An index.json that lies about the manifest's size is refused,
// as a registry index's lie is (D12); the layers reader checked only the
// digest.
func TestOpenLayoutDescriptorSizeLie(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "oci")
	testimage.WriteLayout(t, dir, "v1", smallImage(t))
	p := filepath.Join(dir, "index.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	idx.Manifests[0].Size += 100
	b, _ = json.Marshal(idx)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = testkit.OpenImage(context.Background(), "oci:"+dir+":v1")
	if !errors.Is(err, registry.ErrSizeMismatch) {
		t.Fatalf("Open of a layout whose index.json lies about a size: %v, want ErrSizeMismatch", err)
	}
}

// layers.Open of a registry image logs in once: manifest, config and
// layers through one client for the repository (it was two: ggcr's
// remote.Get and kiln's blob fetcher each made their own).
func TestOpenOneTokenExchange(t *testing.T) {
	ta := testimage.TokenRegistry(t, false)
	ref := ta.Host() + "/team/app:v1"
	testimage.Push(t, ref, smallImage(t))
	ta.Reset()
	ctx := context.Background()
	img, err := testkit.OpenImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	for _, l := range img.Layers {
		if st, err := l.Walk(ctx, layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return nil }); err != nil || !st.Verified {
			t.Fatalf("walk: %+v %v", st, err)
		}
	}
	if ex := ta.Exchanges(); len(ex) != 1 || ex["team/app"] != 1 {
		t.Errorf("token exchanges: %v, want one for team/app", ex)
	}
}

// Pushes and HEADs through a caller's pool (kreg.WithPool) share its
// client of the repository, which may push: one token exchange however
// many images are written and read back (each logged in on its own).
func TestWriteThroughPoolOneTokenExchange(t *testing.T) {
	ta := testimage.TokenRegistry(t, false)
	ctx := context.Background()
	opts := []registry.Option{registry.WithPool(registry.NewPool(nil))}
	img := smallImage(t)
	for _, tag := range []string{"v1", "v2"} {
		if _, err := layers.Write(ctx, img, testkit.Ref(t, ta.Host()+"/team/app:"+tag), opts...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := layers.WriteIndex(ctx, testimage.Index(t, img), testkit.Ref(t, ta.Host()+"/team/app:idx"), opts...); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if desc, err := layers.HeadDigest(ctx, testkit.Ref(t, ta.Host()+"/team/app@"+d.String()).Name, opts...); err != nil || desc.Digest != d {
		t.Fatalf("head: %v, %v", desc, err)
	}
	if ex := ta.Exchanges(); len(ex) != 1 || ex["team/app"] != 1 {
		t.Errorf("token exchanges: %v, want one for team/app", ex)
	}
}
