package layers_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// hubRedirect serves Docker Hub's requests from a local registry and
// records what was asked of which host: the path a short name resolves to.
type hubRedirect struct {
	local string
	mu    sync.Mutex
	asked []string
}

func (h *hubRedirect) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.asked = append(h.asked, r.URL.Host+r.URL.Path)
	h.mu.Unlock()
	u := *r.URL
	u.Scheme, u.Host = "http", h.local
	r2 := r.Clone(r.Context())
	r2.URL = &u
	r2.Host = h.local
	return http.DefaultTransport.RoundTrip(r2)
}

func (h *hubRedirect) saw(p string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.asked {
		if a == p {
			return true
		}
	}
	return false
}

// kiln lock resolves a catalog recipe's nvidia/cuda:TAG on Docker Hub
// (it failed before any request: "could not parse reference"), and a
// Fetcher takes a short repository name the same way.
func TestShortNamesReachDockerHub(t *testing.T) {
	reg := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	testimage.Push(t, reg+"/nvidia/cuda:12.4.1-base-ubuntu22.04", img)
	testimage.Push(t, reg+"/library/ubuntu:24.04", img)
	h := &hubRedirect{local: reg}
	opt := registry.WithTransport(h)
	want, _ := img.Digest()

	dg, per, err := layers.PlatformDigests(context.Background(), "nvidia/cuda:12.4.1-base-ubuntu22.04", opt)
	if err != nil || dg != want.String() || per["linux/amd64"] != want.String() {
		t.Fatalf("PlatformDigests(nvidia/cuda:…) = %s %v, %v; want %s", dg, per, err, want)
	}
	if !h.saw("index.docker.io/v2/nvidia/cuda/manifests/12.4.1-base-ubuntu22.04") {
		t.Errorf("Docker Hub was not asked for nvidia/cuda: %q", h.asked)
	}
	li, err := testkit.OpenImage(context.Background(), "ubuntu:24.04", opt)
	if err != nil {
		t.Fatal(err)
	}
	li.Close()
	if !h.saw("index.docker.io/v2/library/ubuntu/manifests/24.04") {
		t.Errorf("Docker Hub was not asked for library/ubuntu: %q", h.asked)
	}
	m, _ := img.Manifest()
	f, err := registry.NewClient(context.Background(), "ubuntu", []registry.Option{opt})
	if err != nil {
		t.Fatalf("NewFetcher(ubuntu): %v", err)
	}
	rc, err := f.Open(context.Background(), m.Layers[0].Digest, 0, m.Layers[0].Size)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if !h.saw("index.docker.io/v2/library/ubuntu/blobs/" + m.Layers[0].Digest.String()) {
		t.Errorf("the Fetcher did not read library/ubuntu's blob: %q", h.asked)
	}
}
