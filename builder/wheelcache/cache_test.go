package wheelcache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/recipes/wheelkey"
	kilnregistry "github.com/kiln-build/kiln/registry"
)

// fastRetries keeps a refused blob from being retried for seconds.
var fastRetries = WithRegistryOptions(kilnregistry.WithFetchOptions(kilnregistry.WithRetries(1, time.Millisecond)))

// serve starts ggcr's in-process registry behind wrap and returns its
// host:port.
func serve(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	return u.Host
}

func writeWheel(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "flash_attn-2.7.4.post1-cp312-cp312-linux_x86_64.whl")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func open(t *testing.T, repo string, opts ...Option) *Cache {
	t.Helper()
	c, err := Open(repo, append([]Option{fastRetries}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A miss, a push, then a hit that fetches the very bytes pushed.
func TestLookupMissPushHit(t *testing.T) {
	ctx := context.Background()
	c := open(t, serve(t, nil)+"/kiln/wheels")
	k := testKey()
	if e, err := c.Lookup(ctx, k); err != nil || e != nil {
		t.Fatalf("empty cache: %+v, %v", e, err)
	}
	body := strings.Repeat("compiled wheel ", 1000)
	pushed, err := c.Push(ctx, k, writeWheel(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(pushed.Ref.String(), ":"+k.Tag()) {
		t.Errorf("pushed under %s, want tag %s", pushed.Ref, k.Tag())
	}
	// The typed ref is written as it was named: "ref": "REPO:TAG".
	if j, err := json.Marshal(pushed); err != nil || !bytes.Contains(j, []byte(`"ref":"`+c.Repo()+":"+k.Tag()+`"`)) {
		t.Errorf("entry JSON %s, %v; want \"ref\": \"%s:%s\"", j, err, c.Repo(), k.Tag())
	}
	e, err := c.Lookup(ctx, k)
	if err != nil || e == nil {
		t.Fatalf("after push: %+v, %v", e, err)
	}
	if e.Digest != pushed.Digest || e.Size != int64(len(body)) || e.Wider || e.Manifest != pushed.Manifest {
		t.Errorf("hit %+v, pushed %+v", e, pushed)
	}
	dir := t.TempDir()
	p, err := c.Fetch(ctx, e, dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != body || filepath.Base(p) != pushed.Filename {
		t.Errorf("fetched %s: %d bytes", p, len(b))
	}
	// Another key is a miss, whatever else the repository holds.
	k2 := testKey()
	k2.TorchCUDA = "cu126"
	if e, err := c.Lookup(ctx, k2); err != nil || e != nil {
		t.Errorf("another torch CUDA variant: %+v, %v", e, err)
	}
}

// A cached wheel whose bytes do not match its manifest (a flipped byte, a
// cut-short body) is refused: Fetch leaves no file and says ErrCorrupt.
func TestFetchRefusesCorruptWheel(t *testing.T) {
	ctx := context.Background()
	body := strings.Repeat("wheel bytes ", 500)
	for _, tc := range []struct {
		name string
		bend func([]byte) []byte // the blob as the registry serves it
		size int64               // the size the manifest names (0: the wheel's)
	}{
		{"flipped", func(b []byte) []byte { b[100] ^= 0xff; return b }, 0},
		{"truncated", nil, int64(len(body)) + 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var corrupt bool
			host := serve(t, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !corrupt || tc.bend == nil || r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
						h.ServeHTTP(w, r)
						return
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					b := rec.Body.Bytes()
					for k, v := range rec.Header() {
						w.Header()[k] = v
					}
					if len(b) == len(body) {
						b = tc.bend(bytes.Clone(b))
					}
					w.Header().Set("Content-Length", strconv.Itoa(len(b)))
					w.WriteHeader(rec.Code)
					w.Write(b)
				})
			})
			c := open(t, host+"/kiln/wheels")
			pushed, err := c.Push(ctx, testKey(), writeWheel(t, body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.size > 0 {
				// The manifest names more bytes than the blob holds.
				m := manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: ArtifactType,
					Config:      v1.Descriptor{MediaType: emptyJSONMediaType, Digest: emptyDigest(t), Size: 2},
					Layers:      []v1.Descriptor{{MediaType: MediaTypeWheel, Digest: pushed.Digest, Size: tc.size, Annotations: map[string]string{TitleAnnotation: pushed.Filename}}},
					Annotations: map[string]string{KeyAnnotation: testKey().JSON()}}
				raw, _ := json.Marshal(m)
				if err := remote.Put(c.repo.Tag(testKey().Tag()), rawManifest(raw)); err != nil {
					t.Fatal(err)
				}
			}
			corrupt = true
			e, err := c.Lookup(ctx, testKey())
			if err != nil || e == nil {
				t.Fatalf("lookup: %+v, %v", e, err)
			}
			dir := t.TempDir()
			_, err = c.Fetch(ctx, e, dir)
			if err == nil {
				t.Fatal("a corrupt wheel was fetched")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("error %v, want ErrCorrupt", err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left %v in the directory", ents)
			}
		})
	}
}

// A wheel for more architectures is not reused unless allowed; then the
// narrowest that covers the request is, marked Wider. A narrower one is
// never used.
func TestLookupWiderArchs(t *testing.T) {
	ctx := context.Background()
	repo := serve(t, nil) + "/kiln/wheels"
	wide := testKey()
	wide.Archs = []string{"80", "90", "100", "120"}
	mid := testKey()
	mid.Archs = []string{"80", "90", "100"}
	c := open(t, repo)
	for _, k := range []wheelkey.Key{wide, mid} {
		if _, err := c.Push(ctx, k, writeWheel(t, "wheel for "+strings.Join(k.Archs, ";"))); err != nil {
			t.Fatal(err)
		}
	}
	want := testKey()
	want.Archs = []string{"90"}
	if e, err := c.Lookup(ctx, want); err != nil || e != nil {
		t.Fatalf("subset without allow_wider_archs: %+v, %v", e, err)
	}
	cw := open(t, repo, WithAllowWiderArchs(true))
	e, err := cw.Lookup(ctx, want)
	if err != nil || e == nil {
		t.Fatalf("subset with allow_wider_archs: %+v, %v", e, err)
	}
	if !e.Wider || strings.Join(e.Key.Archs, ";") != "80;90;100" {
		t.Errorf("got %v (wider %v), want the narrowest cover 80;90;100", e.Key.Archs, e.Wider)
	}
	other := want
	other.Python, other.PythonABI = "3.11", "cp311"
	if e, err := cw.Lookup(ctx, other); err != nil || e != nil {
		t.Errorf("another Python: %+v, %v", e, err)
	}
	super := testKey()
	super.Archs = []string{"80", "90", "100", "120", "121"}
	if e, err := cw.Lookup(ctx, super); err != nil || e != nil {
		t.Errorf("a narrower wheel answered a wider request: %+v, %v", e, err)
	}
}

// A registry that wants credentials gets them from the keychain; a wrong
// one fails with words that never carry the secret.
func TestCacheWithCredentials(t *testing.T) {
	ctx := context.Background()
	const user, pass = "ci", "s3cret-token-123"
	host := serve(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="kiln"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	good := open(t, host+"/kiln/wheels", WithRegistryOptions(kilnregistry.WithKeychain(staticKeychain{user, pass})))
	if _, err := good.Push(ctx, testKey(), writeWheel(t, "authenticated wheel")); err != nil {
		t.Fatal(err)
	}
	e, err := good.Lookup(ctx, testKey())
	if err != nil || e == nil {
		t.Fatalf("lookup with credentials: %+v, %v", e, err)
	}
	if _, err := good.Fetch(ctx, e, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	bad := open(t, host+"/kiln/wheels", WithRegistryOptions(kilnregistry.WithKeychain(staticKeychain{user, "wrong-" + pass})))
	_, err = bad.Lookup(ctx, testKey())
	if err == nil {
		t.Fatal("wrong credentials: no error")
	}
	if strings.Contains(err.Error(), pass) {
		t.Errorf("the error shows the secret: %v", err)
	}
}

// Through a mirror: a wheel the mirror holds is read from it, though the
// repository's own registry has none.
func TestLookupThroughMirror(t *testing.T) {
	ctx := context.Background()
	origin, mirror := serve(t, nil), serve(t, nil)
	seed := open(t, mirror+"/kiln/wheels")
	if _, err := seed.Push(ctx, testKey(), writeWheel(t, "mirrored wheel")); err != nil {
		t.Fatal(err)
	}
	c := open(t, origin+"/kiln/wheels", WithMirror(mirror))
	e, err := c.Lookup(ctx, testKey())
	if err != nil || e == nil {
		t.Fatalf("through the mirror: %+v, %v", e, err)
	}
	if e.Via != mirror {
		t.Errorf("read via %s, want the mirror %s", e.Via, mirror)
	}
	p, err := c.Fetch(ctx, e, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "mirrored wheel" {
		t.Errorf("fetched %q", b)
	}
}

func TestOpenRefusesTaggedRepo(t *testing.T) {
	for _, r := range []string{"ghcr.io/acme/wheels:v1", "ghcr.io/acme/wheels@sha256:" + strings.Repeat("0", 64), "oci:dir"} {
		if _, err := Open(r); err == nil {
			t.Errorf("%s: no error", r)
		}
	}
	if _, err := Open("127.0.0.1:5000/kiln/wheels"); err != nil {
		t.Error(err)
	}
}

type staticKeychain struct{ user, pass string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: k.user, Password: k.pass}, nil
}

func emptyDigest(t *testing.T) v1.Hash {
	h, _, err := v1.SHA256(strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A mirror that is down does not hide the repository: the lookup reads
// the repository itself.
func TestLookupMirrorDown(t *testing.T) {
	ctx := context.Background()
	origin := serve(t, nil)
	down := httptest.NewServer(http.NotFoundHandler())
	downHost := strings.TrimPrefix(down.URL, "http://")
	down.Close()
	if _, err := open(t, origin+"/kiln/wheels").Push(ctx, testKey(), writeWheel(t, "origin wheel")); err != nil {
		t.Fatal(err)
	}
	c := open(t, origin+"/kiln/wheels", WithMirror(downHost))
	e, err := c.Lookup(ctx, testKey())
	if err != nil || e == nil || e.Via != origin {
		t.Fatalf("mirror down: %+v, %v", e, err)
	}
	miss := testKey()
	miss.Version = "9.9"
	if e, err := c.Lookup(ctx, miss); err != nil || e != nil {
		t.Errorf("a miss with the mirror down: %+v, %v", e, err)
	}
}

func testKey() wheelkey.Key {
	return wheelkey.Key{
		Package: "flash-attn", Version: "2.7.4.post1",
		Source: "sha256:" + strings.Repeat("ab", 32),
		Torch:  "2.6.0", TorchCUDA: "cu124", CUDA: "12.4.1",
		Python: "3.12", PythonABI: "cp312", CXX11ABI: "1",
		Platform: "linux/amd64", Archs: []string{"90", "80"},
		Builder: "docker.io/nvidia/cuda:12.4.1-devel-ubuntu22.04",
		Flags:   []string{"LDFLAGS=-Wl,--strip-all", "FLASH_ATTENTION_FORCE_BUILD=TRUE"},
	}
}

// N5: a registry whose tag list pages forever (every page another Link:
// next) ends the wider-archs lookup in words, after a bounded number of
// pages, instead of keeping the build busy; the failure is an error, not
// a miss that sends the build off to compile.
func TestLookupWiderArchsEndlessTagList(t *testing.T) {
	var pages atomic.Int64
	host := serve(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/tags/list") {
				n := pages.Add(1)
				w.Header().Set("Link", fmt.Sprintf(`<%s?n=100&last=t%d>; rel="next"`, r.URL.Path, n))
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"name":"kiln/wheels","tags":["t%d"]}`, n)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := testKey()
	want.Archs = []string{"90"}
	e, err := open(t, host+"/kiln/wheels", WithAllowWiderArchs(true)).Lookup(ctx, want)
	if e != nil || !errors.Is(err, kilnregistry.ErrTooManyTags) {
		t.Fatalf("endless tag list: entry %+v, err %v; want ErrTooManyTags", e, err)
	}
	if n := pages.Load(); n > kilnregistry.MaxTagPages+1 {
		t.Errorf("%d pages read, want at most %d", n, kilnregistry.MaxTagPages+1)
	}
}

// N4: a wheel stored under a key whose file name is another project or
// version (pip installs what the name says) is not that key's wheel.
func TestLookupRefusesWheelNamedOtherwise(t *testing.T) {
	ctx := context.Background()
	c := open(t, serve(t, nil)+"/kiln/wheels")
	for _, fn := range []string{"evil-1.0-py3-none-any.whl", "flash_attn-2.6.3-cp312-cp312-linux_x86_64.whl"} {
		p := filepath.Join(t.TempDir(), fn)
		os.WriteFile(p, []byte("wheel"), 0o644)
		if _, err := c.Push(ctx, testKey(), p); err != nil {
			t.Fatal(err)
		}
		if e, err := c.Lookup(ctx, testKey()); err != nil || e != nil {
			t.Errorf("%s under flash-attn 2.7.4.post1's key: %+v, %v; want a miss", fn, e, err)
		}
	}
}
