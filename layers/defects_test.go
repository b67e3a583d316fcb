package layers_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	kregistry "github.com/kiln-build/kiln/registry"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/redact"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
)

// F13: a descriptor that reuses another layer's digest with a false size is
// refused (never walked as verified). ggcr's remote layer looks the blob up
// by digest and so verifies the first descriptor's size, not this one's.
func TestDuplicateDigestFalseSize(t *testing.T) {
	tarb := testimage.Tar(t, []testimage.Entry{testimage.Sized("a", 3000)})
	good := testimage.RawLayer(tarb, types.OCIUncompressedLayer)
	for _, lie := range []int64{int64(len(tarb)) + 512, int64(len(tarb)) - 512} {
		img := testimage.Image(t, testimage.Config{}, good, testimage.SizeLie(good, lie))
		ref := testimage.Registry(t) + "/hostile/dup:x"
		testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, good)) // the blob, uploaded honestly
		testimage.Push(t, ref, img)
		for _, r := range []string{ref} {
			lim, err := testkit.OpenImage(context.Background(), r)
			if err == nil {
				for _, l := range lim.Layers {
					st, werr := l.Walk(context.Background(), layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return nil })
					if werr != nil {
						err = werr
						break
					}
					if l.Index == 1 && st.Verified {
						t.Errorf("%s: layer 1 with a false size (%d) walked as verified", r, lie)
					}
				}
				lim.Close()
			}
			if !errors.Is(err, kregistry.ErrSizeMismatch) {
				t.Errorf("%s (size %d): err = %v, want a size mismatch", r, lie, err)
			}
		}
	}
}

// F6: a registry whose error body echoes the request headers (the
// Authorization value: base64 of user:password) is printed redacted, by
// layers.Open, PlatformDigests and a Fetcher alike.
func TestRegistryErrorBodyRedacted(t *testing.T) {
	const user, pass = "ci-bot", "hunter2-Very-Secret"
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="kiln-test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/v2/" {
			reg.ServeHTTP(w, r)
			return
		}
		// A proxy that says why it refused, quoting what it got.
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "forbidden for request %s %s with headers %v (raw Authorization: %s)", r.Method, r.URL.Path, r.Header, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	kc := kregistry.WithKeychain(staticKeychain{user, pass})
	b64 := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		for _, leak := range []string{pass, b64, user + ":" + pass} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: error leaks %q: %v", what, leak, err)
			}
		}
		if !strings.Contains(err.Error(), "403") && !strings.Contains(err.Error(), "orbidden") {
			t.Errorf("%s: error lost the registry's answer: %v", what, err)
		}
	}
	_, err := testkit.OpenImage(context.Background(), host+"/private/app:1", kc)
	check("open", err)
	_, _, err = layers.PlatformDigests(context.Background(), host+"/private/app:1", kc)
	check("platform digests", err)
	f, err := kregistry.NewClient(context.Background(), host+"/private/app", []kregistry.Option{kc})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Size(context.Background(), v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)})
	check("fetcher", err)
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, leak string }{
		{"Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.payload.sig", "eyJhbGciOiJSUzI1NiJ9"},
		{`map[Authorization:[Basic Y2ktYm90OnMzY3IzdA==] User-Agent:[kiln]]`, "Y2ktYm90OnMzY3IzdA=="},
		{`{"errors":[{"detail":{"Authorization":"Basic Y2ktYm90OnMzY3IzdA=="}}]}`, "Y2ktYm90OnMzY3IzdA=="},
		{`{"token":"tok-123456789","access_token":"acc-987654321"}`, "tok-123456789"},
		{`{"token":"tok-123456789","access_token":"acc-987654321"}`, "acc-987654321"},
		{"GET /token?scope=x&password=p4ssw0rd-x failed", "p4ssw0rd-x"},
		{"denied: bearer ya29.a0AfH6SMBx-token", "a0AfH6SMBx"},
		{"denied: bearer abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"},
	} {
		if got := redact.String(tc.in); strings.Contains(got, tc.leak) {
			t.Errorf("Redact(%q) = %q, still holds %q", tc.in, got, tc.leak)
		}
	}
	for _, clean := range []string{
		"blob sha256:abcd: registry answered 404 Not Found",
		"UNAUTHORIZED: basic authentication required",
		`challenge Bearer realm="https://auth.example.com/token",service="registry"`,
	} {
		if got := redact.String(clean); got != clean {
			t.Errorf("a clean message changed: %q → %q", clean, got)
		}
	}
}

// fakeHelper installs docker-credential-NAME running script and a Docker
// config that sends host to it.
func fakeHelper(t *testing.T, host, name, script string) {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "docker-credential-"+name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := t.TempDir()
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"credHelpers":{"`+host+`":"`+name+`"}}`), 0o600)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("DOCKER_CONFIG", cfg)
	t.Setenv("HOME", t.TempDir())
}

// F5: a credential helper that never answers is killed at the timeout.
func TestCredentialHelperTimeout(t *testing.T) {
	host := testimage.Registry(t)
	fakeHelper(t, host, "hang", "exec sleep 30")
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := testkit.OpenImage(context.Background(), host+"/kiln/app:1", kregistry.WithHelperTimeout(200*time.Millisecond))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "docker-credential-hang") || !strings.Contains(err.Error(), "200ms") {
			t.Errorf("err = %v, want the helper named and the timeout", err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("took %v", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a hanging credential helper hangs kiln")
	}
}

// Issue 27: a timed-out credential helper's children were left running
// (only the helper itself was killed). The helper's whole process group
// is killed.
func TestCredentialHelperTimeoutKillsChildren(t *testing.T) {
	host := testimage.Registry(t)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	fakeHelper(t, host, "forks", "sleep 300 &\necho $! > "+pidFile+"\nwait")
	_, err := testkit.OpenImage(context.Background(), host+"/kiln/app:1", kregistry.WithHelperTimeout(500*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("err = %v, want the timeout", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL is delivered before kill(2) returns; wait only for the
	// reaping, which is not the test's to time.
	testkit.WaitGone(t, pid, "the helper's child")
}

// F7: a failing helper's stdout (which may be a secret) is never quoted;
// the error names the helper and its exit status.
func TestCredentialHelperFailureNotQuoted(t *testing.T) {
	host := testimage.Registry(t)
	fakeHelper(t, host, "broken", `echo '{"Username":"u","Secret":"SEKRIT-from-helper-stdout"} partial dump'; exit 3`)
	_, err := testkit.OpenImage(context.Background(), host+"/kiln/app:1")
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), "SEKRIT") || strings.Contains(err.Error(), "partial dump") {
		t.Errorf("error quotes the helper's output: %v", err)
	}
	if !strings.Contains(err.Error(), "docker-credential-broken") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("err = %v, want the helper and its exit status", err)
	}
}

// D4: an oci: layout whose index.json or blobs are not files (/dev/zero,
// a FIFO) grew kiln without bound or hung it, deaf to signals. Refused at
// once, by name.
func TestLayoutRefusesDevicesAndFIFOs(t *testing.T) {
	ctx := context.Background()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))}, "gzip"))
	cfg, _ := img.ConfigName()
	for _, tc := range []struct {
		name   string
		attack func(dir string) error
	}{
		{"index.json is /dev/zero", func(dir string) error {
			os.Remove(filepath.Join(dir, "index.json"))
			return os.Symlink("/dev/zero", filepath.Join(dir, "index.json"))
		}},
		{"index.json is a FIFO", func(dir string) error {
			os.Remove(filepath.Join(dir, "index.json"))
			return syscall.Mkfifo(filepath.Join(dir, "index.json"), 0o600)
		}},
		{"config blob is a FIFO", func(dir string) error {
			p := filepath.Join(dir, "blobs", cfg.Algorithm, cfg.Hex)
			os.Remove(p)
			return syscall.Mkfifo(p, 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			testimage.WriteLayout(t, dir, "x", img)
			if err := tc.attack(dir); err != nil {
				t.Fatal(err)
			}
			li, err := testkit.OpenImage(ctx, "oci:"+dir+":x")
			if err == nil {
				li.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// D12: a config whose rootfs.diff_ids do not match its layers' content
// (the manifest's blobs are honest, the config describes another image)
// is never walked as verified: every encoding, every source.
func TestWalkRefusesDiffIDLie(t *testing.T) {
	other := testimage.Layer(t, []testimage.Entry{testimage.Sized("etc/other", 700)}, "none")
	otherID, err := other.DiffID()
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range []string{"gzip", "zstd", "none"} {
		t.Run(comp, func(t *testing.T) {
			l := testimage.Layer(t, []testimage.Entry{testimage.File("etc/visible", []byte("hello"))}, comp)
			img := testimage.DiffIDLie(t, testimage.Image(t, testimage.Config{}, l), 0, otherID)
			ref := testimage.Registry(t) + "/hostile/diffid:" + comp
			testimage.Push(t, ref, img)
			dir := t.TempDir()
			testimage.WriteLayout(t, dir, "x", img)
			for _, r := range []string{ref, "oci:" + dir + ":x"} {
				im, err := testkit.OpenImage(context.Background(), r)
				if err != nil {
					t.Fatalf("%s: %v", r, err)
				}
				st, err := im.Layers[0].Walk(context.Background(), layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return nil })
				im.Close()
				if !errors.Is(err, kregistry.ErrDigestMismatch) || !strings.Contains(err.Error(), "rootfs.diff_ids[0]") {
					t.Errorf("%s: err = %v (verified %v), want the diff ID mismatch named", r, err, st.Verified)
				}
			}
		})
	}
}
