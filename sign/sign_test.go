package sign

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
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
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// pushed starts an in-process registry (with or without the referrers
// API) holding one random image, and returns its repository and digest.
func pushed(t *testing.T, referrers bool) (name.Repository, v1.Hash) {
	t.Helper()
	opts := []registry.Option{registry.Logger(log.New(io.Discard, "", 0))}
	if referrers {
		opts = append(opts, registry.WithReferrersSupport(true))
	}
	srv := httptest.NewServer(registry.New(opts...))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	repo, err := name.NewRepository(host+"/acme/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag := repo.Tag("v1")
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return repo, d
}

func TestSignVerifyRoundTrip(t *testing.T) {
	ctx := context.Background()
	good, _ := GenerateSigner()
	other, _ := GenerateSigner()
	for _, tc := range []struct {
		name      string
		referrers bool
		format    string
		via       string
	}{
		{"bundle, referrers API", true, FormatBundle, "api"},
		{"bundle, referrers tag schema", false, FormatBundle, "tag"},
		{"legacy .sig tag", false, FormatLegacy, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo, d := pushed(t, tc.referrers)
			ref := repo.Tag("v1").String()
			// Missing first.
			res, err := Verify(ctx, ref, repo, d, []*PublicKey{good.Public()})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified || res.Reason != ReasonMissing {
				t.Fatalf("unsigned: %+v", res)
			}
			s, err := Sign(ctx, ref, good, SignOptions{Format: tc.format})
			if err != nil {
				t.Fatal(err)
			}
			if s.Digest != d.String() || s.Format != tc.format || s.Referrers != tc.via {
				t.Fatalf("signed: %+v", s)
			}
			res, err = Verify(ctx, ref, repo, d, []*PublicKey{good.Public()})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Verified || res.KeyID != good.Public().ID() || res.Format != tc.format {
				t.Fatalf("verify: %+v", res)
			}
			res, err = Verify(ctx, ref, repo, d, []*PublicKey{other.Public()})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified || res.Reason != ReasonWrongKey {
				t.Fatalf("other key: %+v", res)
			}
			// The signer's key is named as every other key is, sha256:HEX
			// (issue 36: the bundle's hint was printed in base64).
			if tc.format == "bundle" && !strings.Contains(res.Detail, "signed by key "+good.Public().ID()) {
				t.Errorf("other key: %q does not name the signer's key %s", res.Detail, good.Public().ID())
			}
			// Either key of several verifies.
			res, _ = Verify(ctx, ref, repo, d, []*PublicKey{other.Public(), good.Public()})
			if !res.Verified {
				t.Fatalf("two keys: %+v", res)
			}
		})
	}
}

// A bundle whose statement was altered (another digest, re-encoded) no
// longer verifies, and one that names another digest is refused even
// though it verifies.
func TestBundleTamperedAndReplayed(t *testing.T) {
	k, _ := GenerateSigner()
	d1 := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("a", 64)}
	d2 := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("b", 64)}
	b, err := newBundle(k, d1)
	if err != nil {
		t.Fatal(err)
	}
	if v := verifyBundle(b, d1, []*PublicKey{k.Public()}); !v.ok {
		t.Fatalf("fresh bundle: %+v", v)
	}
	if v := verifyBundle(b, d2, []*PublicKey{k.Public()}); v.ok || v.reason != ReasonTampered {
		t.Fatalf("replayed for another digest: %+v", v)
	}
	var bb bundle
	_ = json.Unmarshal(b, &bb)
	p, _ := base64.StdEncoding.DecodeString(bb.DSSEEnvelope.Payload)
	p = []byte(strings.Replace(string(p), d1.Hex, d2.Hex, 1))
	bb.DSSEEnvelope.Payload = base64.StdEncoding.EncodeToString(p)
	tb, _ := json.Marshal(bb)
	if v := verifyBundle(tb, d2, []*PublicKey{k.Public()}); v.ok || v.reason != ReasonTampered {
		t.Fatalf("altered payload: %+v", v)
	}
	if v := verifyBundle([]byte("{"), d1, []*PublicKey{k.Public()}); v.ok || v.reason != ReasonInvalid {
		t.Fatalf("garbage: %+v", v)
	}
}

func TestKeyFormats(t *testing.T) {
	k, _ := GenerateSigner()
	dir := t.TempDir()
	enc, err := EncryptCosign(k, []byte("hunter2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, pem, pass, err string
	}{
		{"pkcs8", string(k.PKCS8()), "", ""},
		{"cosign encrypted", string(enc), "hunter2", ""},
		{"cosign wrong password", string(enc), "nope", "decryption failed"},
		{"public key as private", string(k.Public().PEM()), "", "not a private key"},
		{"garbage", "hello", "", "no PEM private key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.pem), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := LoadSigner(p, func() ([]byte, error) { return []byte(tc.pass), nil })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), p) {
					t.Fatalf("err %v, want %q naming %s", err, tc.err, p)
				}
				if strings.Contains(err.Error(), "PRIVATE KEY-----") {
					t.Fatalf("error quotes key material: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Public().ID() != k.Public().ID() {
				t.Fatal("loaded another key")
			}
		})
	}
}

// policyKeys writes keys a.pub and b.pub and a policy file of rules
// (scope → key file) into a new directory; it returns the policy's path
// and the two signers.
func policyKeys(t *testing.T, rules ...[2]string) (string, *Signer, *Signer) {
	t.Helper()
	dir := t.TempDir()
	a, _ := GenerateSigner()
	b, _ := GenerateSigner()
	os.WriteFile(filepath.Join(dir, "a.pub"), a.Public().PEM(), 0o644)
	os.WriteFile(filepath.Join(dir, "b.pub"), b.Public().PEM(), 0o644)
	pol := filepath.Join(dir, "policy.yaml")
	y := "schema: kiln.verify-policy/v1\nkeys:\n"
	for _, r := range rules {
		y += fmt.Sprintf("  - scope: %q\n    key: %s\n", r[0], r[1])
	}
	os.WriteFile(pol, []byte(y), 0o644)
	return pol, a, b
}

func TestPolicy(t *testing.T) {
	pol, a, b := policyKeys(t, [2]string{"reg.local/acme", "a.pub"}, [2]string{"reg.local", "b.pub"}, [2]string{"docker.io/library/ubuntu", "a.pub"})
	dir := filepath.Dir(pol)
	p, err := LoadPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		repo, scope string
		key         *Signer
	}{
		{"reg.local/acme/serve", "reg.local/acme", a},
		{"reg.local/acmex/serve", "reg.local", b},
		{"reg.local/other", "reg.local", b},
		{"ghcr.io/x/y", "", nil},
		{"ubuntu", "index.docker.io/library/ubuntu", a},
		{"index.docker.io/library/ubuntu", "index.docker.io/library/ubuntu", a},
	} {
		r, _ := name.NewRepository(tc.repo)
		ks, scope := p.Keys(r)
		if scope != tc.scope || (tc.key == nil) != (len(ks) == 0) || (tc.key != nil && ks[0].ID() != tc.key.Public().ID()) {
			t.Errorf("%s: scope %q keys %d", tc.repo, scope, len(ks))
		}
	}
	// A plain key is the "*" policy.
	p, err = LoadPolicy(filepath.Join(dir, "a.pub"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := name.NewRepository("any.where/x")
	if ks, scope := p.Keys(r); scope != "*" || len(ks) != 1 {
		t.Fatalf("plain key: %q %d", scope, len(ks))
	}
	os.WriteFile(pol, []byte("schema: kiln.verify-policy/v1\nkeys:\n  - scope: x\n    key: missing.pub\n"), 0o644)
	if _, err := LoadPolicy(pol); err == nil || !strings.Contains(err.Error(), "keys[0].key") {
		t.Fatalf("missing key file: %v", err)
	}
}

func TestSimpleSigning(t *testing.T) {
	k, _ := GenerateSigner()
	other, _ := GenerateSigner()
	d1 := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("a", 64)}
	d2 := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("b", 64)}
	p, _ := newSimpleSigning("reg.local/acme/app", d1)
	sig, _ := k.sign(p)
	b64 := base64.StdEncoding.EncodeToString(sig)
	for _, tc := range []struct {
		name    string
		payload []byte
		sig     string
		d       v1.Hash
		keys    []*PublicKey
		ok      bool
		reason  string
	}{
		{"verifies", p, b64, d1, []*PublicKey{k.Public()}, true, ""},
		{"another digest (replayed)", p, b64, d2, []*PublicKey{k.Public()}, false, ReasonTampered},
		{"another key", p, b64, d1, []*PublicKey{other.Public()}, false, ReasonWrongKey},
		{"payload altered", []byte(strings.Replace(string(p), d1.Hex, d2.Hex, 1)), b64, d2, []*PublicKey{k.Public()}, false, ReasonWrongKey},
		{"signature not base64", p, "%%%", d1, []*PublicKey{k.Public()}, false, ReasonInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := verifySimpleSigning(tc.payload, tc.sig, tc.d, tc.keys)
			if v.ok != tc.ok || v.reason != tc.reason {
				t.Fatalf("%+v, want ok=%v reason=%q", v, tc.ok, tc.reason)
			}
		})
	}
}

// cosign's key file with scrypt parameters cosign never writes is refused
// before any key derivation.
func TestCosignKeyParams(t *testing.T) {
	k, _ := GenerateSigner()
	enc, _ := EncryptCosign(k, []byte("pw"))
	blk, _ := pem.Decode(enc)
	var box map[string]any
	json.Unmarshal(blk.Bytes, &box)
	box["kdf"].(map[string]any)["params"].(map[string]any)["N"] = 1 << 30
	j, _ := json.Marshal(box)
	bad := pem.EncodeToMemory(&pem.Block{Type: blk.Type, Bytes: j})
	if _, err := ParseSigner(bad, func() ([]byte, error) { return []byte("pw"), nil }); err == nil || !strings.Contains(err.Error(), "scrypt parameters") {
		t.Fatalf("err %v", err)
	}
}

// D2: a statement the trusted key signed is a signature only when its
// predicate is cosign's signature predicate. An SBOM or provenance
// attestation signed by the same key (cosign attest, a CI that attests
// every build but signs only approved ones) must not pass as one.
func TestAttestationIsNotASignature(t *testing.T) {
	ctx := context.Background()
	k, _ := GenerateSigner()
	for _, referrers := range []bool{true, false} {
		repo, d := pushed(t, referrers)
		ref := repo.Tag("v1").String()
		for _, pt := range []string{"https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1", ""} {
			b, err := newStatementBundle(k, d, pt, json.RawMessage(`{"bomFormat":"CycloneDX"}`))
			if err != nil {
				t.Fatal(err)
			}
			if v := verifyBundle(b, d, []*PublicKey{k.Public()}); v.ok {
				t.Fatalf("predicate %q verified as a signature: %+v", pt, v)
			}
			desc, err := remote.Head(repo.Tag("v1"))
			if err != nil {
				t.Fatal(err)
			}
			// Stored exactly as cosign v3 stores an attestation: a bundle
			// referrer, annotated with its predicate type.
			if _, _, err := PushReferrer(ctx, repo, *desc, BundleMediaType, b, map[string]string{BundlePredicateAnnotation: pt}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := Verify(ctx, ref, repo, d, []*PublicKey{k.Public()})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verified || res.Reason != ReasonMissing || !strings.Contains(res.Detail, "attestation") {
			t.Fatalf("referrers=%v: attestations alone: %+v", referrers, res)
		}
		if len(res.Attestations) < 3 {
			t.Fatalf("referrers=%v: attestations not listed: %+v", referrers, res.Attestations)
		}
		// A real signature beside them still verifies.
		if _, err := Sign(ctx, ref, k, SignOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err = Verify(ctx, ref, repo, d, []*PublicKey{k.Public()})
		if err != nil || !res.Verified {
			t.Fatalf("referrers=%v: signed: %+v %v", referrers, res, err)
		}
	}
}

// N8: a scope written as a Docker Hub short name means what the image
// name means (ubuntu = docker.io/library/ubuntu), not a registry called
// "ubuntu" that no reference can name, which left the image to the "*"
// key. A scope that can match nothing (a tag, a digest) is refused when
// the policy is read.
func TestPolicyShortNameScope(t *testing.T) {
	pol, _, _ := policyKeys(t, [2]string{"ubuntu", "b.pub"}, [2]string{"localhost", "b.pub"}, [2]string{"*", "a.pub"})
	p, err := LoadPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	for repo, want := range map[string]string{
		"ubuntu":                         "index.docker.io/library/ubuntu",
		"docker.io/library/ubuntu":       "index.docker.io/library/ubuntu",
		"localhost/acme/app":             "localhost",
		"docker.io/library/ubuntu-extra": "*",
	} {
		r, _ := name.NewRepository(repo)
		ks, scope := p.Keys(r)
		if scope != want || len(ks) != 1 {
			t.Errorf("%s: scope %q (%d keys), want %q", repo, scope, len(ks), want)
		}
	}
	for _, bad := range []string{"ubuntu:24.04", "ubuntu@sha256:" + strings.Repeat("a", 64)} {
		os.WriteFile(pol, []byte("schema: kiln.verify-policy/v1\nkeys:\n  - scope: \""+bad+"\"\n    key: a.pub\n"), 0o644)
		if _, err := LoadPolicy(pol); err == nil || !strings.Contains(err.Error(), "keys[0].scope") || !strings.Contains(err.Error(), "a scope is a registry or a repository") {
			t.Errorf("scope %q: err = %v, want it refused", bad, err)
		}
	}
}
