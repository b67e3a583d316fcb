package warm_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
)

// toLocal sends Docker Hub's requests to a local registry.
type toLocal string

func (h toLocal) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	u := *r.URL
	u.Scheme, u.Host = "http", string(h)
	r2.URL, r2.Host = &u, string(h)
	return http.DefaultTransport.RoundTrip(r2)
}

// kiln warm ubuntu:24.04 records the image as containerd's CRI and docker
// name it, docker.io/library/ubuntu:24.04 (a pod naming ubuntu:24.04 finds
// it), not go-containerregistry's index.docker.io/library/ubuntu:24.04.
func TestWarmShortNameRecordedAsCRIName(t *testing.T) {
	reg := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip"))
	testimage.Push(t, reg+"/library/ubuntu:24.04", img)
	lopts := []registry.Option{registry.WithTransport(toLocal(reg))}
	s, err := warm.Resolve(context.Background(), testkit.Refs(t, "ubuntu:24.04"), warm.ResolveOptions{Platform: warmtest.AMD64, Layers: lopts, Blobs: registry.NewPool(lopts), Compression: warm.CompressionGzip})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Images) != 1 || s.Images[0].Name != "docker.io/library/ubuntu:24.04" || s.Images[0].Source != s.Images[0].Name {
		t.Fatalf("images %+v, want docker.io/library/ubuntu:24.04 read from itself", s.Images)
	}
	// The zstd variant is named in the same spelling (a Source unlike
	// Name reports "warm chose the zstd variant").
	imgZ := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "zstd"))
	testimage.Push(t, reg+"/library/ubuntu:24.04-zstd", imgZ)
	z, err := warm.Resolve(context.Background(), testkit.Refs(t, "ubuntu:24.04"), warm.ResolveOptions{Platform: warmtest.AMD64, Layers: lopts, Blobs: registry.NewPool(lopts)})
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	if len(z.Images) != 1 || z.Images[0].Source != "docker.io/library/ubuntu:24.04-zstd" {
		t.Errorf("zstd variant: images %+v", z.Images)
	}
}
