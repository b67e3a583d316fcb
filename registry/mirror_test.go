package registry_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/registry"
)

func TestParseMirror(t *testing.T) {
	tests := []struct {
		in   string
		want registry.Mirror
		bad  string // in the error
	}{
		{in: "mirror.corp:5000", want: registry.Mirror{Registry: "index.docker.io", Endpoint: "mirror.corp:5000"}},
		{in: "docker.io=mirror.local", want: registry.Mirror{Registry: "index.docker.io", Endpoint: "mirror.local"}},
		{in: "ghcr.io=127.0.0.1:5000", want: registry.Mirror{Registry: "ghcr.io", Endpoint: "127.0.0.1:5000"}},
		{in: " 127.0.0.1:5000 = 127.0.0.1:41000 ", want: registry.Mirror{Registry: "127.0.0.1:5000", Endpoint: "127.0.0.1:41000"}},
		{in: "harbor.corp/dockerhub-proxy", want: registry.Mirror{Registry: "index.docker.io", Endpoint: "harbor.corp/dockerhub-proxy"}},
		{in: "https://mirror.gcr.io/", want: registry.Mirror{Registry: "index.docker.io", Endpoint: "mirror.gcr.io"}},
		{in: "nvcr.io=http://mirror.lan:8080", want: registry.Mirror{Registry: "nvcr.io", Endpoint: "mirror.lan:8080", HTTP: true}},
		{in: "", bad: "REGISTRY=ENDPOINT"},
		{in: "=127.0.0.1:1", bad: "REGISTRY=ENDPOINT"},
		{in: "ghcr.io=", bad: "REGISTRY=ENDPOINT"},
		{in: "mirror", bad: "not a registry host"},
		{in: "ftp://mirror.corp", bad: "only http:// and https://"},
		{in: "https://user:secret@mirror.corp", bad: "without credentials"},
		{in: "mirror.corp/v2/proxy", bad: "leave out /v2"},
		{in: "mirror.corp/Proxy", bad: "not a repository prefix"},
		{in: "ghcr.io/org=mirror.corp", bad: "not a registry host"},
	}
	for _, tc := range tests {
		got, err := registry.ParseMirror(tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) || strings.Contains(err.Error(), "secret") {
				t.Errorf("ParseMirror(%q) = %+v, %v; want an error saying %q", tc.in, got, err, tc.bad)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMirror(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// Flags, then $KILN_MIRROR, then daemon.json, then hosts.toml: the first
// source that names a registry decides its mirrors; an empty flag turns
// them all off.
func TestLoadMirrors(t *testing.T) {
	dir := t.TempDir()
	daemon := filepath.Join(dir, "daemon.json")
	write(t, daemon, `{"registry-mirrors": ["https://hub-mirror.corp", "http://10.0.0.5:5000"], "max-concurrent-downloads": 3}`)
	hosts := filepath.Join(dir, "certs.d")
	write(t, filepath.Join(hosts, "ghcr.io", "hosts.toml"), `server = "https://ghcr.io"

[host."https://zz-first.corp"]
  capabilities = ["pull", "resolve"]
  [host."https://zz-first.corp".header]
    authorization = "Basic c2VjcmV0"

[host."https://harbor.corp/v2/ghcr-proxy"]
  capabilities = ["pull", "resolve"]
  override_path = true

[host."https://push-only.corp"]
  capabilities = ["push"]

[host."https://ghcr.io"]
`)
	write(t, filepath.Join(hosts, "docker.io", "hosts.toml"), `[host."https://from-hosts.corp"]`)
	write(t, filepath.Join(hosts, "_default", "hosts.toml"), `[host."https://any.corp"]`)
	files := registry.MirrorFiles{DockerDaemon: daemon, HostsDirs: []string{hosts}}

	eps := func(ms []registry.Mirror) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Registry+"="+m.String()+" ("+filepath.Base(m.Source)+")")
		}
		return out
	}
	got, err := registry.LoadMirrors(nil, "", files)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"index.docker.io=hub-mirror.corp (daemon.json)",
		"index.docker.io=http://10.0.0.5:5000 (daemon.json)",
		"ghcr.io=zz-first.corp (hosts.toml)",
		"ghcr.io=harbor.corp/ghcr-proxy (hosts.toml)",
	}
	if !reflect.DeepEqual(eps(got), want) {
		t.Errorf("files only:\n got %q\nwant %q", eps(got), want)
	}

	got, err = registry.LoadMirrors(nil, "env-hub.corp, ghcr.io=env-ghcr.corp", files)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"index.docker.io=env-hub.corp ($KILN_MIRROR)", "ghcr.io=env-ghcr.corp ($KILN_MIRROR)"}
	if !reflect.DeepEqual(eps(got), want) {
		t.Errorf("env over files:\n got %q\nwant %q", eps(got), want)
	}

	got, err = registry.LoadMirrors([]string{"flag-hub.corp"}, "ghcr.io=env-ghcr.corp", files)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"index.docker.io=flag-hub.corp (--mirror)", "ghcr.io=env-ghcr.corp ($KILN_MIRROR)"}
	if !reflect.DeepEqual(eps(got), want) {
		t.Errorf("flag over env:\n got %q\nwant %q", eps(got), want)
	}

	if got, err := registry.LoadMirrors([]string{""}, "env-hub.corp", files); err != nil || len(got) != 0 {
		t.Errorf("--mirror \"\": %v, %v; want none", got, err)
	}
	if _, err := registry.LoadMirrors(nil, "ghcr.io=", files); err == nil || !strings.Contains(err.Error(), "$KILN_MIRROR") {
		t.Errorf("a bad $KILN_MIRROR: %v, want an error naming it", err)
	}
	write(t, daemon, `{"registry-mirrors": "not a list"}`)
	if _, err := registry.LoadMirrors(nil, "", files); err == nil || !strings.Contains(err.Error(), daemon) {
		t.Errorf("a bad daemon.json: %v, want an error naming it", err)
	}
	if got, err := registry.LoadMirrors(nil, "", registry.MirrorFiles{DockerDaemon: filepath.Join(dir, "none.json"), HostsDirs: []string{filepath.Join(dir, "none")}}); err != nil || len(got) != 0 {
		t.Errorf("no files: %v, %v; want none", got, err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// notes collects the lines a run says about mirrors.
type notes struct {
	mu    sync.Mutex
	lines []string
}

func (n *notes) add(s string) { n.mu.Lock(); n.lines = append(n.lines, s); n.mu.Unlock() }
func (n *notes) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.Join(n.lines, "\n")
}

func quietRegistry(t *testing.T) *httptest.Server {
	s := httptest.NewServer(ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	return s
}

// The mirror serves the image and the registry does not: it is read
// through the mirror, named by its real reference, and said so. A second
// mirror that is down is passed over; the registry is not asked.
func TestMirrorReadFirst(t *testing.T) {
	ctx := context.Background()
	origin, mirror := quietRegistry(t), quietRegistry(t)
	down := httptest.NewServer(nil)
	down.Close()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 100)}, "gzip"))
	originHost, mirrorHost, downHost := hostOf(origin), hostOf(mirror), hostOf(down)
	testimage.Push(t, mirrorHost+"/proxy/acme/app:v1", img)

	var n notes
	opts := []registry.Option{registry.WithMirrors(
		registry.Mirror{Registry: downHost, Endpoint: "127.0.0.1:1", Source: "--mirror"}, // another registry's
		registry.Mirror{Registry: originHost, Endpoint: downHost, Source: "--mirror"},
		registry.Mirror{Registry: originHost, Endpoint: mirrorHost + "/proxy", Source: "$KILN_MIRROR"},
	), registry.WithMirrorNote(n.add)}
	opts = registry.Pooled(opts)
	ref, err := registry.ParseName(originHost+"/acme/app:v1", opts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := registry.ClientFor(ctx, ref.Context(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	raw, desc, err := c.Manifest(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := img.RawManifest(); string(raw) != string(want) {
		t.Fatalf("manifest %s, want the mirror's", raw)
	}
	if via := c.Via(ref); via != mirrorHost+"/proxy" {
		t.Errorf("Via = %q, want the mirror", via)
	}
	if c.Repository().String() != ref.Context().String() {
		t.Errorf("client names %s, want the real repository %s", c.Repository(), ref.Context())
	}
	cfg, _ := img.ConfigName()
	rc, err := c.Open(ctx, cfg, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if want, _ := img.RawConfigFile(); string(b) != string(want) {
		t.Errorf("config %s, want the mirror's", b)
	}
	if _, err := c.Head(ctx, ref.Context().Digest(desc.Digest.String())); err != nil {
		t.Errorf("head by digest: %v", err)
	}
	if got := n.String(); !strings.Contains(got, "read through mirror "+mirrorHost+"/proxy ($KILN_MIRROR)") || len(n.lines) != 1 {
		t.Errorf("notes:\n%s\nwant one line naming the mirror (a tag, then a digest, of one repository)", got)
	}

	// A write goes to the registry, never to a mirror.
	pc, err := registry.ClientFor(ctx, ref.Context(), append(opts, registry.WithPush())...)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Via(ref) != "" {
		t.Error("a push client reads through a mirror")
	}
	if _, _, err := pc.Manifest(ctx, ref); err == nil {
		t.Error("the push client read the image the registry does not have")
	}
}

// The mirror is down or lacks the image: the registry is read, and the
// note says what the mirror answered. Failing everywhere, the error names
// the mirror and the registry, in words.
func TestMirrorFallsBackToRegistry(t *testing.T) {
	ctx := context.Background()
	origin, empty := quietRegistry(t), quietRegistry(t)
	down := httptest.NewServer(nil)
	down.Close()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 100)}, "gzip"))
	testimage.Push(t, hostOf(origin)+"/acme/app:v1", img)

	for _, tc := range []struct{ name, mirror, says string }{
		{"down", hostOf(down), "mirror " + hostOf(down) + " (--mirror): "},
		{"without the image", hostOf(empty), "mirror " + hostOf(empty) + " (--mirror): "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n notes
			opts := []registry.Option{registry.WithMirrors(registry.Mirror{Registry: hostOf(origin), Endpoint: tc.mirror, Source: "--mirror"}), registry.WithMirrorNote(n.add)}
			ref, _ := registry.ParseName(hostOf(origin)+"/acme/app:v1", opts...)
			c, err := registry.ClientFor(ctx, ref.Context(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Manifest(ctx, ref); err != nil {
				t.Fatalf("manifest: %v", err)
			}
			if c.Via(ref) != "" {
				t.Errorf("Via = %q, want the registry", c.Via(ref))
			}
			cfg, _ := img.ConfigName()
			if _, err := c.Size(ctx, cfg); err != nil {
				t.Errorf("blob size: %v", err)
			}
			if got := n.String(); !strings.Contains(got, "read from "+hostOf(origin)+" after "+tc.says) {
				t.Errorf("notes:\n%s\nwant the registry named after %q", got, tc.says)
			}
			t.Logf("notes: %s", n.String())
			missing, _ := registry.ParseName(hostOf(origin)+"/acme/app:nope", opts...)
			_, _, err = c.Manifest(ctx, missing)
			t.Logf("error: %v", err)
			if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "then "+hostOf(origin)+": ") || !strings.Contains(err.Error(), `"nope"`) {
				t.Errorf("error %v; want the mirror's answer, then the registry's in words", err)
			}
		})
	}
}

func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// An image's referrers (its signatures) are listed where the image is
// read: through the mirror when the registry's name does not even resolve
// (warm --verify-key behind a mirror listed them at the registry and
// failed on its DNS name).
func TestMirrorReferrers(t *testing.T) {
	ctx := context.Background()
	mirror := quietRegistry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 100)}, "gzip"))
	mirrorHost := hostOf(mirror)
	testimage.Push(t, mirrorHost+"/acme/app:v1", img)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	// A referrer of the image, pushed to the mirror (the referrers tag
	// schema's sha256-HEX tag, which every registry can serve).
	sig := mutate.Subject(testimage.Image(t, testimage.Config{}), v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d, Size: 1}).(v1.Image)
	sd, err := sig.Digest()
	if err != nil {
		t.Fatal(err)
	}
	testimage.Push(t, mirrorHost+"/acme/app@"+sd.String(), sig)

	opts := registry.Pooled([]registry.Option{registry.WithMirrors(registry.Mirror{Registry: "kiln-mirror.invalid", Endpoint: mirrorHost, Source: "--mirror"})})
	ref, err := registry.ParseName("kiln-mirror.invalid/acme/app:v1", opts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := registry.ClientFor(ctx, ref.Context(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	im, err := c.Referrers(ctx, d)
	if err != nil {
		t.Fatalf("referrers through the mirror: %v", err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != sd {
		t.Errorf("referrers of %s: %+v, want %s", d, im.Manifests, sd)
	}
}

// When the registry gives no answer at all (its name does not resolve)
// and a mirror said "not found", the read fails as not found: a caller
// looking for something optional (a signature tag) finds it absent.
func TestMirrorNotFoundWhenRegistryUnreachable(t *testing.T) {
	ctx := context.Background()
	mirror := quietRegistry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	testimage.Push(t, hostOf(mirror)+"/acme/app:v1", img)
	opts := registry.Pooled([]registry.Option{registry.WithMirrors(registry.Mirror{Registry: "kiln-mirror.invalid", Endpoint: hostOf(mirror), Source: "--mirror"})})
	ref, err := registry.ParseName("kiln-mirror.invalid/acme/app:absent", opts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := registry.ClientFor(ctx, ref.Context(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Manifest(ctx, ref)
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode != http.StatusNotFound {
		t.Fatalf("a tag the mirror lacks, the registry unreachable: %v (want the mirror's 404)", err)
	}
	if !strings.Contains(err.Error(), "kiln-mirror.invalid") {
		t.Errorf("the error does not say the registry was tried: %v", err)
	}
}
