package layers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	kregistry "github.com/kiln-build/kiln/registry"

	"github.com/kiln-build/kiln/internal/redact"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

type anonKeychain struct{}

func (anonKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return authn.Anonymous, nil }

func smallImage(t *testing.T) v1.Image {
	return testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
}

// wantWords checks err reads as words: it holds every want, no Go map,
// no registry code, and names each digest at most once.
func wantWords(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	msg := err.Error()
	for _, w := range want {
		if n := strings.Count(msg, w); n != 1 {
			t.Errorf("%s: error says %q %d times, want once:\n%s", what, w, n, msg)
		}
	}
	for _, bad := range []string{"map[", "MANIFEST_UNKNOWN", "NAME_UNKNOWN", "UNAUTHORIZED", "DENIED", "dial tcp"} {
		if strings.Contains(msg, bad) {
			t.Errorf("%s: error shows %q:\n%s", what, bad, msg)
		}
	}
	for _, f := range strings.Fields(msg) {
		if strings.HasPrefix(f, "sha256:") && strings.Count(msg, strings.Trim(f, `",:()`)) > 1 {
			t.Errorf("%s: error repeats %s:\n%s", what, f, msg)
		}
	}
}

// Issue 25 item 6: a tag, a manifest or a repository the registry does not
// have reads as words naming REG/REPO (and a few tags), not as
// `MANIFEST_UNKNOWN: manifest unknown; map[Tag:nope]`.
func TestRegistryNotFoundInWords(t *testing.T) {
	host := testimage.Registry(t)
	img := smallImage(t)
	for _, tag := range []string{"v1", "v2"} {
		testimage.Push(t, host+"/team/app:"+tag, img)
	}
	ctx := context.Background()
	_, err := testkit.OpenImage(ctx, host+"/team/app:nope")
	wantWords(t, "tag", err, `tag "nope" not found in `+host+"/team/app (tags: v1, v2)")
	if err != nil && strings.Contains(err.Error(), `image "`) {
		t.Errorf("tag: the image is named twice: %v", err)
	}

	missing := "sha256:" + strings.Repeat("0", 64)
	_, err = testkit.OpenImage(ctx, host+"/team/app@"+missing)
	wantWords(t, "digest", err, "manifest "+missing+" not found in "+host+"/team/app")

	_, _, err = layers.PlatformDigests(ctx, host+"/team/nothing:v1")
	wantWords(t, "repository", err, "team/nothing")

	// Many tags: a few are named, with the count.
	for i := 0; i < 9; i++ {
		testimage.Push(t, fmt.Sprintf("%s/team/many:t%d", host, i), img)
	}
	_, err = testkit.OpenImage(ctx, host+"/team/many:nope")
	wantWords(t, "many tags", err, `tag "nope" not found in `+host+"/team/many (tags: t0, t1, t2, t3, t4, t5, … 9 in all)")
	// Those nearest the tag asked for come first.
	_, err = testkit.OpenImage(ctx, host+"/team/many:t8-cuda")
	wantWords(t, "near tags", err, `tag "t8-cuda" not found in `+host+"/team/many (tags: t8, t0, t1, t2, t3, t4, … 9 in all)")
}

// tokenRegistry answers like a registry behind a token server: 401 with a
// Bearer challenge; the token endpoint refuses any credential but
// user:pass, and a registry request without the token gets UNAUTHORIZED
// with distribution's detail (the Go map ggcr printed).
func tokenRegistry(t *testing.T, user, pass string, deny bool) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	const good = "Bearer good-token-0123456789"
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			u, p, ok := r.BasicAuth()
			if ok && (u != user || p != pass) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"incorrect username or password"}]}`)
				return
			}
			tok := "anonymous-token"
			if ok {
				tok = strings.TrimPrefix(good, "Bearer ")
			}
			json.NewEncoder(w).Encode(map[string]string{"token": tok})
			return
		}
		if r.Header.Get("Authorization") != good || r.URL.Path == "/v2/" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="test"`, srv.URL))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":[{"Type":"repository","Class":"","Name":"priv/app","Action":"pull"}]}]}`)
			return
		}
		if deny {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}`)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Missing and wrong credentials read differently, and both say
// `docker login HOST`; the wrong ones name where they came from.
func TestRegistryCredentialsInWords(t *testing.T) {
	ctx := context.Background()
	host := tokenRegistry(t, "ci", "right-password", false)
	_, err := testkit.OpenImage(ctx, host+"/priv/app:1", kregistry.WithKeychain(anonKeychain{}))
	wantWords(t, "no credentials", err, host+" needs credentials for priv/app", "run docker login "+host)

	_, err = testkit.OpenImage(ctx, host+"/priv/app:1", kregistry.WithKeychain(staticKeychain{"ci", "wrong-password"}))
	wantWords(t, "wrong credentials", err, host+" refused the credentials from kiln's keychain", "run docker login "+host)

	// From the Docker config: the file is named.
	host = tokenRegistry(t, "ci", "right-password", false)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{"auths":{%q:{"auth":"Y2k6d3JvbmctcGFzc3dvcmQ="}}}`, host) // ci:wrong-password
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
	t.Setenv("HOME", t.TempDir())
	_, err = testkit.OpenImage(ctx, host+"/priv/app:1")
	wantWords(t, "docker config", err, host+" refused the credentials from "+filepath.Join(dir, "config.json"), "run docker login "+host)
	if err != nil && strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("error leaks the password: %v", err)
	}

	// Right credentials, no access.
	host = tokenRegistry(t, "ci", "right-password", true)
	_, err = testkit.OpenImage(ctx, host+"/priv/app:1", kregistry.WithKeychain(staticKeychain{"ci", "right-password"}))
	wantWords(t, "denied", err, host+" denied", "403 Forbidden", "docker login "+host)
}

// Network failures name the host and what to do: TLS to a plain-HTTP
// registry names --insecure-registry HOST, an untrusted certificate says
// so, a closed port names host and port, a name DNS does not know says so.
func TestNetworkErrorsInWords(t *testing.T) {
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	host := strings.TrimPrefix(plain.URL, "http://")
	_, err := kregistry.HTTPClient(nil, kregistry.WithRetries(0, 0)).Get("https://" + host + "/v2/")
	wantWords(t, "plain HTTP", err, host+" speaks plain HTTP", "--insecure-registry "+host)

	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	thost := strings.TrimPrefix(tlsSrv.URL, "https://")
	_, err = kregistry.HTTPClient(nil, kregistry.WithRetries(0, 0)).Get(tlsSrv.URL + "/v2/")
	wantWords(t, "untrusted", err, thost+"'s TLS certificate is not trusted", "x509")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	_, err = testkit.OpenImage(context.Background(), closed+"/a/b:1")
	wantWords(t, "refused", err, "nothing answers at "+closed, "connection refused")

	_, err = testkit.OpenImage(context.Background(), "kiln-no-such-host.invalid/a/b:1")
	wantWords(t, "dns", err, "no host named kiln-no-such-host.invalid")
}

// D6: a registry that redirects blobs to presigned storage, which refuses
// with an error body echoing the signed request: no signature, credential,
// token or signed query appears in any error, by ggcr's path (the config
// blob), the Fetcher's (a layer) or Redact on the body itself.
func TestPresignedStorageErrorRedacted(t *testing.T) {
	host := testimage.PresignedRegistry(t)
	img := smallImage(t)
	testimage.Push(t, host+"/team/app:1", img)
	noSecret := func(what, msg string) {
		t.Helper()
		for _, s := range testimage.PresignedSecrets() {
			if strings.Contains(msg, s) {
				t.Errorf("%s: prints %q:\n%s", what, s, msg)
			}
		}
	}
	ctx := context.Background()
	_, err := testkit.OpenImage(ctx, host+"/team/app:1")
	if err == nil {
		t.Fatal("open: no error")
	}
	noSecret("open", err.Error())
	if !strings.Contains(err.Error(), "SignatureDoesNotMatch") || !strings.Contains(err.Error(), "403") {
		t.Errorf("open: the storage's answer is lost: %v", err)
	}

	ld, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	dg, _ := ld[0].Digest()
	f, err := kregistry.NewClient(ctx, host+"/team/app", nil, kregistry.WithRetries(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Open(ctx, dg, 0, -1)
	if err == nil {
		t.Fatal("fetch: no error")
	}
	noSecret("fetch", err.Error())

	// The body as the storage sent it, through the shared redaction.
	resp, err := http.Get("http://" + host + "/v2/team/app/blobs/" + dg.String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), testimage.PresignedSignature) {
		t.Fatalf("the storage's body lacks the signature: %s", body)
	}
	noSecret("redact", redact.String(string(body)+" "+resp.Request.URL.String()))
}

// Redaction of signed URLs keeps ordinary text: parameters that are not
// signatures, and words that only look like them.
func TestRedactSignedURLKeepsOrdinaryText(t *testing.T) {
	for _, keep := range []string{
		"GET https://r.example/v2/a/tags/list?n=100&last=v1",
		"exit code=1; sort=asc; step=3",
		"blob sha256:" + strings.Repeat("ab", 32) + ": registry answered 403 Forbidden",
	} {
		if got := redact.String(keep); got != keep {
			t.Errorf("Redact(%q) = %q", keep, got)
		}
	}
	for in, secret := range map[string]string{
		"https://s.example/b?sv=2022-11-02&sig=AbCdEf0123456789%2B%3D&se=2026": "AbCdEf0123456789",
		"https://storage.googleapis.com/b/o?X-Goog-Signature=deadbeefcafe0123": "deadbeefcafe0123",
		"<SignatureProvided>0123456789abcdef</SignatureProvided>":              "0123456789abcdef",
		"<StringToSign>AWS4-HMAC-SHA256\n20261202T000000Z</StringToSign>":      "20261202T000000Z",
		"X-Amz-Security-Token=FwoGZXIvYXdzEKILN&X-Amz-Signature=abc":           "FwoGZXIvYXdzEKILN",
	} {
		if got := redact.String(in); strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q keeps %q", in, got, secret)
		}
	}
}
