package layers_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	kregistry "github.com/kiln-build/kiln/registry"

	"github.com/kiln-build/kiln/internal/testimage"
)

// staticKeychain hands out one credential for every registry.
type staticKeychain struct{ user, pass string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: k.user, Password: k.pass}, nil
}

func TestRegistryAuthAndSecrecy(t *testing.T) {
	const user, secret = "ci-bot", "s3cr3t-Token-Value"
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != secret {
			w.Header().Set("WWW-Authenticate", `Basic realm="kiln-test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	ref, _ := name.ParseReference(host+"/private/app:1", name.Insecure)
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: user, Password: secret})); err != nil {
		t.Fatal(err)
	}

	got, err := testkit.OpenImage(context.Background(), host+"/private/app:1", kregistry.WithKeychain(staticKeychain{user, secret}))
	if err != nil {
		t.Fatalf("with credentials: %v", err)
	}
	got.Close()

	wrong := "wrong-" + secret
	_, err = testkit.OpenImage(context.Background(), host+"/private/app:1", kregistry.WithKeychain(staticKeychain{user, wrong}))
	if err == nil {
		t.Fatal("wrong credentials accepted")
	}
	if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), secret) {
		t.Errorf("error leaks the credential: %v", err)
	}
	if !strings.Contains(err.Error(), "private/app:1") {
		t.Errorf("error does not name the image: %v", err)
	}
}
