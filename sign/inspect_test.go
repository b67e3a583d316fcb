package sign_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/sign"
)

// Inspect (host check --image's signature item): an index holding an
// image and a BuildKit attestation manifest is listed with the
// attestation's predicate types; its signature counts under a key that
// verifies it, and is only listed without one. A layout has nothing to
// inspect, and an unreachable registry is the Inspection's Err.
func TestInspect(t *testing.T) {
	ctx := context.Background()
	reg := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))}, "gzip"))
	imgDigest, _ := img.Digest()
	att, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:       static.NewLayer([]byte(`{"predicateType":"https://spdx.dev/Document"}`), "application/vnd.in-toto+json"),
		Annotations: map[string]string{layers.AnnotationPredicateType: "https://spdx.dev/Document"},
	})
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img}, mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{
		Annotations: map[string]string{layers.AnnotationRefType: layers.RefTypeAttestation, layers.AnnotationRefDigest: imgDigest.String()},
	}})
	ref := reg + "/kiln/app:1"
	if _, err := layers.WriteIndex(ctx, idx, testkit.Ref(t, ref)); err != nil {
		t.Fatal(err)
	}
	k, _ := sign.GenerateSigner()
	if _, err := sign.Sign(ctx, ref, k, sign.SignOptions{}); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(t.TempDir(), "k.pub")
	if err := os.WriteFile(pub, k.Public().PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := sign.LoadPolicy(pub)
	if err != nil {
		t.Fatal(err)
	}

	got := sign.Inspect(ctx, ref, pol)
	if got == nil || got.Err != "" || !got.KeyGiven || !got.Result.Verified {
		t.Fatalf("with the key: %+v", got)
	}
	if len(got.Attestations) != 1 || !strings.Contains(got.Attestations[0], "for "+imgDigest.String()+": [https://spdx.dev/Document]") {
		t.Fatalf("attestations %q, want the attestation manifest with its predicate type", got.Attestations)
	}
	listed := sign.Inspect(ctx, ref, nil)
	if listed == nil || listed.KeyGiven || listed.Result.Verified || len(listed.Result.Signatures) != 1 {
		t.Fatalf("without a key: %+v", listed)
	}
	if got := sign.Inspect(ctx, "oci:"+t.TempDir()+":app", nil); got != nil {
		t.Fatalf("a layout: %+v, want nothing to inspect", got)
	}
	if got := sign.Inspect(ctx, "127.0.0.1:1/kiln/app:1", nil); got == nil || got.Err == "" {
		t.Fatalf("an unreachable registry: %+v, want its Err", got)
	}
}
