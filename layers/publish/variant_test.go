package publish_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/layers/publish"
)

// PublishVariant: the conversion's image is written through the chain
// (here with an SBOM: the index), the variant's own digest and layer
// report come back, and a failed conversion writes nothing.
func TestPublishVariant(t *testing.T) {
	ctx := context.Background()
	src := image(t)
	var converted v1.Image
	conv := func(ctx context.Context, src v1.Image) (*convert.Result, error) {
		res, err := convert.ToZstd(ctx, src, convert.Options{})
		if err == nil {
			converted = res.Image
		}
		return res, err
	}
	attach := func(_ context.Context, img v1.Image, ref layers.Ref) (v1.ImageIndex, v1.Hash, error) {
		a := mutate.ConfigMediaType(empty.Image, "application/vnd.test.sbom")
		d, err := a.Digest()
		return mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img}, mutate.IndexAddendum{Add: a}), d, err
	}
	dir := t.TempDir()
	v, err := publish.PublishVariant(ctx, publish.WithSBOM(publish.Writer(), attach), conv, src, testkit.Ref(t, "oci:"+dir+":v"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := converted.Digest()
	if v.Image != want || v.Digest == want || v.SBOM == "" || len(v.Layers) != 1 {
		t.Fatalf("variant %+v (image %s), want the image %s inside an index, one layer reported", v.Published, v.Image, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		t.Errorf("nothing written: %v", err)
	}

	empty := t.TempDir()
	boom := errors.New("boom")
	if _, err := publish.PublishVariant(ctx, publish.Writer(), func(context.Context, v1.Image) (*convert.Result, error) { return nil, boom }, src, testkit.Ref(t, "oci:"+empty+":v")); !errors.Is(err, boom) {
		t.Fatalf("a failed conversion: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("a failed conversion wrote %d entries to %s", len(ents), filepath.Base(empty))
	}
}

// Erofs's errors say --format erofs.
func TestErofsNamesTheFlag(t *testing.T) {
	if err := erofs.Check(context.Background()); err != nil {
		t.Skip(err)
	}
	_, err := publish.Erofs(convert.Options{}, erofs.Compression("bogus"))(context.Background(), image(t))
	if err == nil || err.Error()[:len("--format erofs: ")] != "--format erofs: " {
		t.Fatalf("err %v", err)
	}
}
