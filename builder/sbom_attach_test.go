package builder

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/cdxschema"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/sbom"
)

// kiln build --sbom's attachment, on a pushed image, through the build's
// publish chain: the lock's pinned inputs as a CycloneDX referrer that
// validates against the schema.
func TestBuildSBOMReferrer(t *testing.T) {
	ref, d := testimage.ReferrersRegistry(t)
	torch, cudnn := "2.5.1", "9.1.0"
	lock := &recipes.Lock{
		LockVersion: 1, Recipe: "kiln.yaml", RecipeHash: "sha256:" + strings.Repeat("1", 64), DataVersion: "2026-11",
		Plan: &recipes.Plan{Name: "serve", CUDA: "12.4.1", CuDNN: &cudnn, Torch: &torch, OS: "debian12", Python: "3.11", CUDAArchs: []string{"8.0", "9.0"}},
		BaseImages: map[string]recipes.LockedImage{
			"runtime": {Ref: "nvidia/cuda:12.4.1-runtime", Digest: "sha256:" + strings.Repeat("a", 64), Platforms: map[string]string{"linux/amd64": "sha256:" + strings.Repeat("b", 64)}},
		},
		Wheels: []recipes.LockedWheel{{Name: "torch", Version: "2.5.1+cu124", Platform: "linux/amd64", Filename: "torch-2.5.1+cu124-cp311-cp311-linux_x86_64.whl", URL: "https://download.pytorch.org/whl/torch.whl", SHA256: strings.Repeat("c", 64)}},
	}
	o := RunOptions{Plan: lock.Plan, SBOM: true, Lock: lock, Version: "dev"}
	o.Inputs = Inputs{RecipeHash: lock.RecipeHash, LockDigest: "sha256:" + strings.Repeat("d", 64)}
	p, err := o.publisher("gzip", true).Publish(context.Background(), publish.Pushed(d), testkit.Ref(t, ref))
	if err != nil || p.SBOM == "" || p.Digest != d {
		t.Fatalf("publish: %+v %v", p, err)
	}
	got := []string{p.SBOM}
	tag, _ := name.NewTag(ref, name.Insecure)
	idx, err := remote.Referrers(tag.Context().Digest(d.String()))
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	// (go-containerregistry's registry lists the config media type as
	// the artifact type; the manifest's own artifactType is kiln's.)
	if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != got[0] {
		t.Fatalf("referrers: %+v", im.Manifests)
	}
	art, _ := remote.Image(tag.Context().Digest(got[0]))
	if m, _ := art.Manifest(); m.Subject == nil || m.Subject.Digest != d {
		t.Fatalf("referrer subject: %+v", m)
	}
	if raw, _ := art.RawManifest(); !strings.Contains(string(raw), `"artifactType":"`+sbom.MediaType+`"`) {
		t.Fatalf("referrer artifactType: %s", raw)
	}
	ls, _ := art.Layers()
	rc, _ := ls[0].Compressed()
	b, _ := io.ReadAll(rc)
	if err := cdxschema.Validate(b); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	for _, want := range []string{`"kiln:lock-sha256"`, strings.Repeat("d", 64), `"kiln:plan:cuda-archs"`, "8.0,9.0", strings.Repeat("c", 64), "pkg:pypi/torch@2.5.1%2Bcu124", strings.Repeat("b", 64), `"kiln:plan:cudnn"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("build SBOM lacks %s", want)
		}
	}
}
