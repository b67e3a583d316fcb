package weights

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// A stripped image pushed as an index — the image and an attestation
// manifest beside it, as kiln slim --sbom and kiln build --provenance
// write — still leads to its weights: the index is resolved to its image
// (never the attestation) and the image's label followed. make demo's
// weights pull of its slim image failed here.
func TestResolveFollowsLabelThroughIndex(t *testing.T) {
	ctx := context.Background()
	reg := testimage.Registry(t)
	c := collect(t, modelFiles, WithLargeFileThreshold(1<<20))
	_, adg, err := c.Publish(ctx, testkit.Ref(t, reg+"/w/model:v1"), "", "sha256:"+strings.Repeat("2", 64))
	if err != nil {
		t.Fatal(err)
	}
	aref, err := ArtifactRef(testkit.Ref(t, reg+"/w/model:v1"), adg)
	if err != nil {
		t.Fatal(err)
	}
	img := testimage.Image(t, testimage.Config{Labels: map[string]string{layers.LabelWeightsManifest: aref.String()}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("app/main.py", 10)}, "gzip"))
	att := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("statement", 10)}, "gzip"))
	dg, _ := img.Digest()
	idx := mutate.AppendManifests(testimage.Index(t, img), mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{
		Platform:    &v1.Platform{OS: "unknown", Architecture: "unknown"},
		Annotations: map[string]string{layers.AnnotationRefType: layers.RefTypeAttestation, layers.AnnotationRefDigest: dg.String()}}})
	ref, err := name.ParseReference(reg+"/app:slim", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(ctx, reg+"/app:slim", "")
	if err != nil {
		t.Fatalf("weights of an index'd image: %v", err)
	}
	if res.Ref != aref.String() || res.Image == "" || len(res.Manifest.Files) == 0 {
		t.Errorf("resolved %s (image %q, %d files), want the artifact %s", res.Ref, res.Image, len(res.Manifest.Files), aref)
	}
	// An index is never a weights artifact itself.
	if _, err := resolveRegistry(ctx, reg+"/app:slim", false); err == nil || !strings.Contains(err.Error(), "image index") {
		t.Errorf("artifact-only resolve of an index: %v", err)
	}
}
