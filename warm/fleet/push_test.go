package fleet

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	kregistry "github.com/kiln-build/kiln/registry"
)

type staticKeychain struct{ a authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return k.a, nil }

// pushUpstream is a registry that wants basic auth (user kiln, password
// pw), echoes the Authorization header in one error body, and stalls one
// blob mid-body until the test ends.
func pushUpstream(t *testing.T, pw string) (name.Registry, string) {
	t.Helper()
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("kiln:"+pw))
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != want:
			w.Header().Set("WWW-Authenticate", `Basic realm="kiln-test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
		case strings.HasPrefix(r.URL.Path, "/v2/echo/"):
			http.Error(w, `{"errors":[{"code":"DENIED","message":"no access for `+r.Header.Get("Authorization")+`"}]}`, http.StatusForbidden)
		case strings.HasPrefix(r.URL.Path, "/v2/stall/"):
			w.Header().Set("Content-Length", "1048576")
			w.WriteHeader(http.StatusOK)
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
			select { // silent, the connection held open
			case <-r.Context().Done():
			case <-release:
			}
		default:
			inner.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	reg, err := name.NewRegistry(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return reg, want
}

// Push mode's proxy reaches the registry through layers' one transport
// and keychain: the keychain of the registry options (not the Docker
// config's), the idle timeout (a stalled registry fails the host's request
// instead of freezing it), and redacted error bodies (this machine's
// credentials never reach the host).
func TestPushProxyUsesKilnTransport(t *testing.T) {
	const pw = "s3cret-pw-0123456789"
	reg, authz := pushUpstream(t, pw)
	lopts := []kregistry.Option{
		kregistry.WithKeychain(staticKeychain{&authn.Basic{Username: "kiln", Password: pw}}),
		kregistry.WithIdleTimeout(300 * time.Millisecond),
	}
	scopes := []string{reg.Repo("ok").Scope(transport.PullScope)}
	var sent atomic.Int64
	proxy, err := registryProxy(context.Background(), reg, scopes, lopts, &sent)
	if err != nil {
		t.Fatal(err)
	}
	host := httptest.NewServer(proxy)
	defer host.Close()
	client := &http.Client{Timeout: 20 * time.Second}
	get := func(path string) (int, string, error) {
		resp, err := client.Get(host.URL + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}

	// The keychain of the options authenticates.
	if code, body, err := get("/v2/"); err != nil || code != http.StatusOK {
		t.Errorf("GET /v2/ through the proxy: %d %q %v (the options' keychain not used?)", code, body, err)
	}

	// An error body echoing the Authorization header arrives redacted.
	code, body, err := get("/v2/echo/manifests/x")
	if err != nil || code != http.StatusForbidden {
		t.Errorf("echo: %d %q %v", code, body, err)
	}
	if b64 := strings.TrimPrefix(authz, "Basic "); strings.Contains(body, b64) || strings.Contains(body, pw) {
		t.Errorf("the host was served this machine's credentials: %q", body)
	}

	// A stall mid-body ends the host's request within the idle timeout.
	start := time.Now()
	_, _, err = get(fmt.Sprintf("/v2/stall/blobs/sha256:%s", strings.Repeat("0", 64)))
	if err == nil {
		t.Error("a stalled blob was served whole")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a stalled registry held the host's request %s (no idle timeout)", d)
	}
}
