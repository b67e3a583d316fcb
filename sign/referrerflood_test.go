package sign

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// D13: a registry lists a flood of referrers for the image: thousands of
// attestations, and bundle-typed junk (manifests that do not exist)
// listed before the one real signature, with or without cosign's
// predicate annotation. The real signature is found, and the Result
// (warm's report and ready marker) stays small, counting what it leaves
// out.
func TestReferrerFloodDoesNotHideTheSignature(t *testing.T) {
	for _, tc := range []struct {
		name string
		junk int
		// annotated junk claims cosign's predicate but is older.
		annotated bool
		// unsigned: no real signature listed; the junk is refused,
		// bounded and counted.
		unsigned bool
	}{
		{"40 unannotated junk first", 40, false, false},
		{"300 older annotated junk first", 300, true, false},
		{"300 junk and no signature", 300, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var listing []byte
			inner := registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0)))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if listing != nil && strings.Contains(r.URL.Path, "/referrers/") {
					w.Header().Set("Content-Type", string(types.OCIImageIndex))
					w.Write(listing)
					return
				}
				inner.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			repo, _ := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/acme/app", name.Insecure)
			img, _ := random.Image(64, 1)
			if err := remote.Write(repo.Tag("v1"), img); err != nil {
				t.Fatal(err)
			}
			d, _ := img.Digest()
			k, _ := GenerateSigner()
			signed, err := SignDigest(ctx, repo, descOf(t, repo, d.String()), k, SignOptions{Now: func() time.Time { return time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) }})
			if err != nil {
				t.Fatal(err)
			}
			real := descOf(t, repo, signed.Artifact)
			real.ArtifactType = BundleMediaType
			real.Annotations = map[string]string{BundlePredicateAnnotation: CosignSignPredicate, "org.opencontainers.image.created": "2026-01-02T00:00:00Z"}

			const attestations = 20000
			var ms []v1.Descriptor
			for i := range tc.junk {
				j := v1.Descriptor{MediaType: types.OCIManifestSchema1, ArtifactType: BundleMediaType, Size: 500,
					Digest:      v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", i+1)},
					Annotations: map[string]string{"org.opencontainers.image.created": "2026-06-01T00:00:00Z"}}
				if tc.annotated {
					j.Annotations = map[string]string{BundlePredicateAnnotation: CosignSignPredicate, "org.opencontainers.image.created": "2025-06-01T00:00:00Z"}
				}
				ms = append(ms, j)
			}
			for i := range attestations {
				ms = append(ms, v1.Descriptor{MediaType: types.OCIManifestSchema1, ArtifactType: "application/spdx+json", Size: 500,
					Digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", 1<<40+i)}})
			}
			if !tc.unsigned {
				ms = append(ms, real)
			}
			listing, _ = json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: ms})

			res, err := Verify(ctx, repo.Tag("v1").String(), repo, d, []*PublicKey{k.Public()})
			if err != nil {
				t.Fatal(err)
			}
			if tc.unsigned {
				if res.Verified || len(res.Signatures) != maxListed || res.SignaturesOmitted != maxSignatures-maxListed || res.Unread != tc.junk-maxSignatures || !strings.Contains(res.Detail, "not read") {
					t.Errorf("unsigned: verified %v, %d signatures listed, %d omitted, %d unread: %s", res.Verified, len(res.Signatures), res.SignaturesOmitted, res.Unread, res.Detail)
				}
				return
			}
			if !res.Verified || res.Artifact != signed.Artifact {
				t.Fatalf("the real signature is hidden: %s: %s", res.Reason, res.Detail)
			}
			if len(res.Signatures) > maxListed || len(res.Attestations) > maxListed || res.AttestationsOmitted != attestations-len(res.Attestations) {
				t.Errorf("kept %d signatures, %d attestations (%d omitted): want at most %d each, the rest counted", len(res.Signatures), len(res.Attestations), res.AttestationsOmitted, maxListed)
			}
			if b, _ := json.Marshal(res); len(b) > 32<<10 {
				t.Errorf("result is %d bytes of JSON", len(b))
			}
		})
	}
}

func descOf(t *testing.T, repo name.Repository, dg string) v1.Descriptor {
	t.Helper()
	d, err := remote.Get(repo.Digest(dg))
	if err != nil {
		t.Fatal(err)
	}
	return d.Descriptor
}
