package warm

import (
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/layers"
	"github.com/opencontainers/go-digest"
)

// Source reads blob bytes. OpenRange returns the bytes of blob dg in repo
// from offset off; n < 0 means to the end, otherwise exactly n bytes.
// Implementations retry transient failures themselves; the bytes are not
// verified here (the target verifies at commit).
type Source interface {
	OpenRange(ctx context.Context, repo name.Repository, dg digest.Digest, off, n int64) (io.ReadCloser, error)
}

// RegistrySource reads blobs through layers.Fetcher (ranged, authenticated
// GETs; 5xx and 429 retried with backoff, Retry-After honoured), one
// fetcher per repository.
type RegistrySource struct {
	opts  []layers.Option
	fopts []layers.FetchOption

	mu       sync.Mutex
	fetchers map[string]*layers.Fetcher
}

// NewRegistrySource returns a source for registries reached with opts. Its
// transport keeps enough idle connections per host for parallel Range
// chunks and never asks for transfer compression (blobs are compressed
// already, and it would break Range offsets).
func NewRegistrySource(opts []layers.Option, fopts ...layers.FetchOption) *RegistrySource {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.DisableCompression = true
	all := append([]layers.Option{layers.WithTransport(t)}, opts...)
	return &RegistrySource{opts: all, fopts: fopts, fetchers: map[string]*layers.Fetcher{}}
}

func (s *RegistrySource) fetcher(ctx context.Context, repo name.Repository) (*layers.Fetcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := repo.Name()
	if f, ok := s.fetchers[key]; ok {
		return f, nil
	}
	f, err := layers.NewFetcher(ctx, key, s.opts, s.fopts...)
	if err != nil {
		return nil, err
	}
	s.fetchers[key] = f
	return f, nil
}

// OpenRange implements Source.
func (s *RegistrySource) OpenRange(ctx context.Context, repo name.Repository, dg digest.Digest, off, n int64) (io.ReadCloser, error) {
	f, err := s.fetcher(ctx, repo)
	if err != nil {
		return nil, err
	}
	h, err := v1.NewHash(dg.String())
	if err != nil {
		return nil, err
	}
	return f.Open(ctx, h, off, n)
}
