package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/internal/cdxschema"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/sign"
)

// signRegistry is go-containerregistry's registry (referrers API on)
// holding one linux/amd64 image at REPO:v1.
func signRegistry(t *testing.T) (string, v1.Hash) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/acme/app:v1"
	img, _ := random.Image(128, 1)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, _ = mutate.ConfigFile(img, cf)
	tag, _ := name.NewTag(ref, name.Insecure)
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return ref, d
}

func TestSignVerifyCommands(t *testing.T) {
	ref, d := signRegistry(t)
	dir := t.TempDir()
	k, _ := sign.GenerateSigner()
	other, _ := sign.GenerateSigner()
	key, pub, otherPub := filepath.Join(dir, "k.pem"), filepath.Join(dir, "k.pub"), filepath.Join(dir, "o.pub")
	os.WriteFile(key, k.PKCS8(), 0o600)
	os.WriteFile(pub, k.Public().PEM(), 0o644)
	os.WriteFile(otherPub, other.Public().PEM(), 0o644)

	// Usage errors: exit 2, and with --json one object naming the error.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sign", ref, "--json"}, "--key is required"},
		{[]string{"sign", ref, "--key", pub, "--json"}, "not a private key"},
		{[]string{"sign", ref, "--key", key, "--format", "x", "--json"}, "--format"},
		{[]string{"sign", "oci:" + dir, "--key", key, "--json"}, "not a registry reference"},
		{[]string{"verify", ref, "--json"}, "--key is required"},
		{[]string{"verify", ref, "--key", key, "--json"}, "PUBLIC KEY"},
	} {
		code, out, _ := run(t, tc.args...)
		var rep struct{ Schema, Error string }
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != ExitUsage || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%v: exit %d, %v %q, want 2 and %q", tc.args, code, err, out, tc.want)
		}
		if strings.Contains(out, "PRIVATE KEY-----") {
			t.Errorf("%v: key material in output", tc.args)
		}
	}
	// Missing, then signed, then the wrong key: exit 4 with reasons.
	code, out, _ := run(t, "verify", ref, "--key", pub, "--json")
	if code != ExitUnverified || !strings.Contains(out, `"reason": "missing"`) {
		t.Fatalf("unsigned: exit %d\n%s", code, out)
	}
	code, out, errOut := run(t, "sign", ref, "--key", key, "--json")
	var sr signReport
	if json.Unmarshal([]byte(out), &sr); code != 0 || sr.Signed == nil || sr.Signed.Digest != d.String() || sr.Signed.Referrers != "api" {
		t.Fatalf("sign: exit %d %s %s", code, out, errOut)
	}
	if code, out, _ = run(t, "verify", ref, "--key", pub); code != 0 || !strings.Contains(out, "verified (bundle") {
		t.Fatalf("verify: exit %d %s", code, out)
	}
	code, out, errOut = run(t, "verify", ref, "--key", otherPub, "--json")
	if code != ExitUnverified || !strings.Contains(out, `"reason": "wrong-key"`) || !strings.Contains(errOut, ref) {
		t.Fatalf("wrong key: exit %d\n%s\n%s", code, out, errOut)
	}
}

// kiln build --sbom's attachment, on a pushed image: the lock's pinned
// inputs as a CycloneDX referrer that validates against the schema.
func TestBuildSBOMReferrer(t *testing.T) {
	ref, d := signRegistry(t)
	torch, cudnn := "2.5.1", "9.1.0"
	lock := &recipes.Lock{
		LockVersion: 1, Recipe: "kiln.yaml", RecipeHash: "sha256:" + strings.Repeat("1", 64), DataVersion: "2026-11",
		Plan: &recipes.Plan{Name: "serve", CUDA: "12.4.1", CuDNN: &cudnn, Torch: &torch, OS: "debian12", Python: "3.11", CUDAArchs: []string{"8.0", "9.0"}},
		BaseImages: map[string]recipes.LockedImage{
			"runtime": {Ref: "nvidia/cuda:12.4.1-runtime", Digest: "sha256:" + strings.Repeat("a", 64), Platforms: map[string]string{"linux/amd64": "sha256:" + strings.Repeat("b", 64)}},
		},
		Wheels: []recipes.LockedWheel{{Name: "torch", Version: "2.5.1+cu124", Platform: "linux/amd64", Filename: "torch-2.5.1+cu124-cp311-cp311-linux_x86_64.whl", URL: "https://download.pytorch.org/whl/torch.whl", SHA256: strings.Repeat("c", 64)}},
	}
	pushed := []builder.Pushed{{Ref: ref, Compression: "gzip", Digest: d.String()}}
	in := builder.Inputs{RecipeHash: lock.RecipeHash, LockDigest: "sha256:" + strings.Repeat("d", 64)}
	got, err := buildSBOM(context.Background(), pushed, lock.Plan, lock, in, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("buildSBOM: %v %v", got, err)
	}
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
	for _, want := range []string{`"kiln:lock-sha256"`, strings.Repeat("d", 64), `"kiln:plan:cuda-archs"`, "8.0,9.0", strings.Repeat("c", 64), "pkg:pypi/torch@2.5.1+cu124", strings.Repeat("b", 64), `"kiln:plan:cudnn"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("build SBOM lacks %s", want)
		}
	}
}
