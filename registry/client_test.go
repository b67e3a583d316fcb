package registry_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/registry"
)

// A pool's client reads a repository's manifests, blobs and referrers
// after one token exchange, however many reads and however often it is
// asked for; another repository gets its own.
func TestPoolOneTokenExchangePerRepository(t *testing.T) {
	ta := testimage.StartTokenAuth(t, ggcr.New(ggcr.WithReferrersSupport(true), ggcr.Logger(log.New(io.Discard, "", 0))))
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 1000)}, "gzip"))
	for _, repo := range []string{"/acme/app:v1", "/acme/other:v1"} {
		testimage.Push(t, ta.Host()+repo, img)
	}
	ta.Reset()
	ctx := context.Background()
	pool := registry.NewPool(nil)
	opts := []registry.Option{registry.WithPool(pool)}
	for _, repo := range []string{"/acme/app:v1", "/acme/other:v1"} {
		ref, err := registry.ParseName(ta.Host()+repo, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			c, err := registry.ClientFor(ctx, ref.Context(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			raw, desc, err := c.Manifest(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := img.RawManifest()
			if string(raw) != string(want) || !desc.MediaType.IsImage() {
				t.Fatalf("manifest %s: %s, want the pushed one", desc.MediaType, raw)
			}
			if _, _, err := c.Manifest(ctx, ref.Context().Digest(desc.Digest.String())); err != nil {
				t.Fatalf("by digest: %v", err)
			}
			cfg, _ := img.ConfigName()
			rc, err := c.Open(ctx, cfg, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, rc)
			rc.Close()
			if _, err := remote.Referrers(ref.Context().Digest(desc.Digest.String()), registry.RemoteFor(ctx, ref.Context(), opts...)...); err != nil {
				t.Fatalf("referrers: %v", err)
			}
		}
	}
	ex := ta.Exchanges()
	if len(ex) != 2 || ex["acme/app"] != 1 || ex["acme/other"] != 1 {
		t.Errorf("token exchanges: %v, want one per repository", ex)
	}
}

// A manifest read by digest is the bytes of that digest: a registry that
// serves other bytes is refused (ErrDigestMismatch), and a tag not found
// is told in words.
func TestManifestVerified(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/":
		case strings.HasSuffix(r.URL.Path, "/manifests/nope"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`)
		default:
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			io.WriteString(w, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`)
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	repo, _ := name.NewRepository(host+"/acme/app", name.Insecure)
	c, err := registry.ClientFor(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Manifest(ctx, repo.Digest("sha256:"+strings.Repeat("a", 64)))
	if !errors.Is(err, registry.ErrDigestMismatch) {
		t.Errorf("lying manifest: %v, want ErrDigestMismatch", err)
	}
	_, desc, err := c.Manifest(ctx, repo.Tag("v1"))
	if err != nil || !desc.MediaType.IsImage() {
		t.Errorf("by tag: %v %v", desc, err)
	}
	_, _, err = c.Manifest(ctx, repo.Tag("nope"))
	if msg := registry.RedactError(err); msg == nil || !strings.Contains(msg.Error(), `tag "nope" not found in `+host+"/acme/app") {
		t.Errorf("missing tag: %v", msg)
	}
}

// A client made WithPush writes with the token it read with: one
// exchange; the pool hands it out for reads too. A pool's read-only
// client is replaced by one that may push when a write asks.
func TestPoolPushClient(t *testing.T) {
	ta := testimage.StartTokenAuth(t, ggcr.New(ggcr.WithReferrersSupport(true), ggcr.Logger(log.New(io.Discard, "", 0))))
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 1000)}, "gzip"))
	ctx := context.Background()
	pool := registry.NewPool(nil)
	opts := []registry.Option{registry.WithPool(pool)}
	for _, tc := range []struct {
		repo      string
		readFirst bool
		want      int
	}{{"acme/app", false, 1}, {"acme/other", true, 2}} {
		ref, err := registry.ParseName(ta.Host()+"/"+tc.repo+":v1", opts...)
		if err != nil {
			t.Fatal(err)
		}
		var reader *registry.Client
		if tc.readFirst {
			if reader, err = registry.ClientFor(ctx, ref.Context(), opts...); err != nil {
				t.Fatal(err)
			}
		}
		w, err := registry.ClientFor(ctx, ref.Context(), append(opts, registry.WithPush())...)
		if err != nil {
			t.Fatal(err)
		}
		if w == reader {
			t.Errorf("%s: the read-only client was handed out to push", tc.repo)
		}
		if err := remote.Write(ref, img, w.Remote(ctx)...); err != nil {
			t.Fatalf("%s: push: %v", tc.repo, err)
		}
		r, err := registry.ClientFor(ctx, ref.Context(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		if r != w {
			t.Errorf("%s: a read after the push got another client", tc.repo)
		}
		d, _ := img.Digest()
		if _, _, err := r.Manifest(ctx, ref.Context().Digest(d.String())); err != nil {
			t.Fatal(err)
		}
		if !r.ReferrersAPI(ctx, d) {
			t.Errorf("%s: the registry's referrers API not seen", tc.repo)
		}
		if ex := ta.Exchanges(); ex[tc.repo] != tc.want {
			t.Errorf("%s: token exchanges %v, want %d", tc.repo, ex, tc.want)
		}
	}
}
