package warm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
)

// Source reads blob bytes. OpenRange returns the bytes of blob dg in repo
// from offset off; n < 0 means to the end, otherwise exactly n bytes.
// Implementations retry transient failures themselves; the bytes are not
// verified here (the target verifies at commit).
type Source interface {
	OpenRange(ctx context.Context, repo name.Repository, dg digest.Digest, off, n int64) (io.ReadCloser, error)
}

// RegistrySource reads blobs with authenticated, ranged HTTP GETs and
// retries 5xx, 429 and dropped connections with exponential backoff,
// honouring Retry-After.
type RegistrySource struct {
	// Keychain resolves credentials (default: Docker config + helpers).
	Keychain authn.Keychain
	// Transport is the base HTTP transport.
	Transport http.RoundTripper
	// Retries is how many times one request is retried (default 5).
	Retries int
	// MaxBackoff caps the wait between tries, Retry-After included
	// (default 30s).
	MaxBackoff time.Duration
	// OnRetry, when set, is told about each retry (progress, logs).
	OnRetry func(dg digest.Digest, attempt int, wait time.Duration, err error)

	mu      sync.Mutex
	clients map[string]*http.Client
}

// NewRegistrySource returns a source with kiln's defaults. The transport
// keeps enough idle connections per host for parallel Range chunks.
func NewRegistrySource() *RegistrySource {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	// Blobs are already compressed; asking for gzip transfer encoding would
	// only cost CPU and break Range offsets.
	t.DisableCompression = true
	return &RegistrySource{Keychain: authn.DefaultKeychain, Transport: t}
}

// StatusError is a registry's non-success answer.
type StatusError struct {
	URL        string
	Code       int
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: registry answered %d %s", e.URL, e.Code, http.StatusText(e.Code))
}

func (s *RegistrySource) client(ctx context.Context, repo name.Repository) (*http.Client, error) {
	key := repo.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[key]; ok {
		return c, nil
	}
	kc := s.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	auth, err := authn.Resolve(ctx, kc, repo.Registry)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %v", repo.RegistryStr(), err)
	}
	base := s.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	// The token exchange is bound to context.Background: the transport is
	// cached and outlives the first caller's context.
	rt, err := transport.NewWithContext(context.Background(), repo.Registry, auth, base, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, fmt.Errorf("registry %s: %v", repo.RegistryStr(), err)
	}
	c := &http.Client{Transport: rt}
	if s.clients == nil {
		s.clients = map[string]*http.Client{}
	}
	s.clients[key] = c
	return c, nil
}

// OpenRange implements Source.
func (s *RegistrySource) OpenRange(ctx context.Context, repo name.Repository, dg digest.Digest, off, n int64) (io.ReadCloser, error) {
	retries := s.Retries
	if retries == 0 {
		retries = 5
	}
	for attempt := 0; ; attempt++ {
		rc, err := s.try(ctx, repo, dg, off, n)
		if err == nil {
			return rc, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if attempt >= retries || !Retryable(err) {
			return nil, err
		}
		wait := s.backoff(attempt, err)
		if s.OnRetry != nil {
			s.OnRetry(dg, attempt+1, wait, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (s *RegistrySource) backoff(attempt int, err error) time.Duration {
	maxb := s.MaxBackoff
	if maxb == 0 {
		maxb = 30 * time.Second
	}
	wait := 200 * time.Millisecond << min(attempt, 8)
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > 0 {
		wait = se.RetryAfter
	}
	return min(wait, maxb)
}

func (s *RegistrySource) try(ctx context.Context, repo name.Repository, dg digest.Digest, off, n int64) (io.ReadCloser, error) {
	c, err := s.client(ctx, repo)
	if err != nil {
		return nil, err
	}
	u := fmt.Sprintf("%s://%s/v2/%s/blobs/%s", repo.Registry.Scheme(), repo.RegistryStr(), repo.RepositoryStr(), dg)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if off > 0 || n >= 0 {
		if n >= 0 {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
		} else {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-", off))
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); ok && start != off {
			resp.Body.Close()
			return nil, fmt.Errorf("GET %s: asked for bytes from %d, registry sent from %d", u, off, start)
		}
	case http.StatusOK:
		// A registry (or a redirect target) that ignores Range sends the
		// whole blob: skip what we already have.
		if off > 0 {
			if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
				resp.Body.Close()
				return nil, fmt.Errorf("GET %s: skipping to offset %d: %w", u, off, err)
			}
		}
	default:
		resp.Body.Close()
		return nil, &StatusError{URL: u, Code: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	}
	if n >= 0 {
		return &limitedBody{Reader: io.LimitReader(resp.Body, n), c: resp.Body}, nil
	}
	return resp.Body, nil
}

type limitedBody struct {
	io.Reader
	c io.Closer
}

func (l *limitedBody) Close() error { return l.c.Close() }

func contentRangeStart(h string) (int64, bool) {
	// "bytes 100-199/1000"
	h = strings.TrimPrefix(h, "bytes ")
	a, _, ok := strings.Cut(h, "-")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(a, 10, 64)
	return v, err == nil
}

func parseRetryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// Retryable says whether err is worth another try: 5xx, 429, 408, and
// connections that broke.
func Retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code >= 500 || se.Code == http.StatusTooManyRequests || se.Code == http.StatusRequestTimeout
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection refused")
}
