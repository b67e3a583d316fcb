package publish_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/sign"
)

func image(t *testing.T) v1.Image {
	t.Helper()
	return testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))}, "gzip"))
}

// "write the image, attach the SBOM, sign it" in one chain: the image is
// written as the index the SBOM decorator made of it, the signature is
// of that index's digest as the registry holds it, and verifies with the
// key; a layout read back holds the same digest.
func TestWriteAttachSign(t *testing.T) {
	ctx := context.Background()
	reg := testimage.Registry(t)
	img := image(t)
	k, err := sign.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	var att v1.Hash
	attach := func(_ context.Context, img v1.Image, ref layers.Ref) (v1.ImageIndex, v1.Hash, error) {
		a := mutate.ConfigMediaType(empty.Image, "application/vnd.test.sbom")
		var err error
		if att, err = a.Digest(); err != nil {
			return nil, v1.Hash{}, err
		}
		return mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img}, mutate.IndexAddendum{Add: a}), att, nil
	}
	dest := reg + "/kiln/app:1"
	pub := publish.WithSign(publish.WithSBOM(publish.Writer(), attach), &publish.Signer{Key: k})
	p, err := pub.Publish(ctx, img, testkit.Ref(t, dest))
	if err != nil {
		t.Fatal(err)
	}
	desc, err := layers.HeadDigest(ctx, testkit.Ref(t, dest).Name)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ref.String() != dest || p.Digest != desc.Digest || !desc.MediaType.IsIndex() || p.SBOM != att.String() {
		t.Fatalf("published %+v; the registry holds %s (%s), attestation %s", p, desc.Digest, desc.MediaType, att)
	}
	if p.Signed == nil || p.Signed.Digest != p.Digest.String() {
		t.Fatalf("signed %+v, want the index %s", p.Signed, p.Digest)
	}
	r, err := layers.ParseRef(dest)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sign.Verify(ctx, dest, r.Name.Context(), p.Digest, []*sign.PublicKey{k.Public()})
	if err != nil || !res.Verified {
		t.Fatalf("verify: %+v, %v", res, err)
	}
}

// A decorator with nothing to do is its inner Interface: no SBOM, no key.
// An OCI layout destination gets the image itself.
func TestDecoratorsWithNothingToDo(t *testing.T) {
	img := image(t)
	w := publish.Writer()
	dir := filepath.Join(t.TempDir(), "out")
	p, err := publish.WithSign(publish.WithSBOM(w, nil), nil).Publish(context.Background(), img, testkit.Ref(t, "oci:"+dir+":app"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if p.Digest != want || p.SBOM != "" || p.Signed != nil {
		t.Fatalf("published %+v, want the image %s alone", p, want)
	}
	got, err := testkit.OpenImage(context.Background(), "oci:"+dir+":app")
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Digest != want {
		t.Fatalf("the layout holds %s, want %s", got.Digest, want)
	}
}

// What BuildKit pushed is signed where it is, with nothing written: a
// Pushed artifact sends the Writer to no registry (this one does not
// answer), and a failed write signs nothing.
func TestPushedIsNotWrittenAndAFailedWriteSignsNothing(t *testing.T) {
	h := v1.Hash{Algorithm: "sha256", Hex: "0123456789012345678901234567890123456789012345678901234567890123"}
	p, err := publish.Writer().Publish(context.Background(), publish.Pushed(h), testkit.Ref(t, "127.0.0.1:1/kiln/app:1"))
	if err != nil || p.Digest != h {
		t.Fatalf("pushed: %+v, %v", p, err)
	}
	k, _ := sign.GenerateSigner()
	failing := publish.Func(func(context.Context, publish.Artifact, layers.Ref) (*publish.Published, error) {
		return nil, errors.New("the registry is full")
	})
	s := publish.WithSign(failing, &publish.Signer{Key: k})
	if _, err := s.Publish(context.Background(), image(t), testkit.Ref(t, "127.0.0.1:1/kiln/app:1")); err == nil || err.Error() != "the registry is full" {
		t.Fatalf("a failed write: %v, want its own error and no signing", err)
	}
}

// The referrer SBOM decorator: the image's digest stays what the inner
// Publish wrote, the BOM is its referrer in the registry (subject: that
// digest), and an OCI layout, with nowhere to keep one, gets none.
func TestWithSBOMReferrer(t *testing.T) {
	ctx := context.Background()
	ref, d := testimage.ReferrersRegistry(t)
	var asked int
	bom := func(_ context.Context, p *publish.Published) (string, []sbom.Component, []sbom.Property, error) {
		asked++
		if p.Digest != d {
			t.Errorf("BOM asked for %s, want the published %s", p.Digest, d)
		}
		return sbom.TypeData, nil, []sbom.Property{{Name: "kiln:test", Value: "1"}}, nil
	}
	pub := publish.WithSBOMReferrer(publish.Writer(), bom, "dev")
	p, err := pub.Publish(ctx, publish.Pushed(d), testkit.Ref(t, ref))
	if err != nil || p.Digest != d || p.SBOM == "" {
		t.Fatalf("published %+v, %v", p, err)
	}
	tag, _ := name.NewTag(ref)
	idx, err := remote.Referrers(tag.Context().Digest(d.String()))
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != p.SBOM {
		t.Fatalf("referrers of %s: %+v, want the SBOM %s", d, im.Manifests, p.SBOM)
	}

	dir := filepath.Join(t.TempDir(), "layout")
	lp, err := pub.Publish(ctx, image(t), testkit.Ref(t, "oci:"+dir))
	if err != nil || lp.SBOM != "" || asked != 1 {
		t.Fatalf("layout: published %+v, %v, BOM asked %d times (want once, for the registry)", lp, err, asked)
	}
	if publish.WithSBOMReferrer(pub, nil, "dev") == nil {
		t.Fatal("nil BOM: want the inner Interface")
	}
}
