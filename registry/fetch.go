package registry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/kiln-build/kiln/internal/redact"
)

// Client reads one registry repository: its manifests (Manifest) and its
// blobs, with HTTP Range requests (Open), all through one authenticated
// transport (Docker config, credential helpers, plain HTTP only for
// loopback and --insecure-registry hosts): one token exchange and one
// connection pool per repository, however many reads. Remote hands the
// same transport to go-containerregistry for what kiln leaves to it (the
// referrers API).
//
// It exists beside go-containerregistry's remote package because warm-up and
// weight pulls need what remote does not offer: resuming a blob from byte N
// after an interruption, and splitting one large blob into parallel chunks.
//
// One retry policy for every blob read: a request that fails before its
// body starts (connection errors, an idle timeout, 5xx answers, 429 with its
// Retry-After) and a body that breaks mid-way (a reset, an idle timeout)
// are retried with the same backoff and budget; a broken body resumes by
// Range from the last byte read, so the caller sees one unbroken stream.
// Only when the budget is spent does a read fail; the caller may then keep
// the bytes it has for a later run.
type Client struct {
	repo   name.Repository
	base   string // scheme://host/v2/repo/
	rt     http.RoundTripper
	client *http.Client
	push   bool // its token may push (WithPush)
	// m, when set, is what the Client reads through: the registry's
	// mirrors, then the registry (WithMirrors); the fields above are
	// unset.
	m *mirrored
	retryPolicy

	mu sync.Mutex
	// Requests counts HTTP requests sent (tests and reports read it).
	requests int
}

// FetchOption tunes a Client's retries.
type FetchOption func(*Client)

// WithRetries sets how many times a failed request is retried (default 5)
// and the first backoff (default 200ms, doubling, capped at maxWait).
func WithRetries(n int, backoff time.Duration) FetchOption {
	return func(f *Client) { f.retries, f.backoff = n, backoff }
}

// WithMaxWait caps one wait between retries, Retry-After included (default 30s).
func WithMaxWait(d time.Duration) FetchOption { return func(f *Client) { f.maxWait = d } }

// WithFetchOptions sets FetchOptions for every Client made from these
// options (by packages that make Clients for their callers: weights,
// layers' own registry images).
func WithFetchOptions(fo ...FetchOption) Option {
	return func(o *Options) { o.fetch = append(o.fetch, fo...) }
}

// NewClient returns a Client for repo ("REGISTRY/REPO", a tag or digest is
// ignored). Authentication happens once here (token exchange), so a bad
// credential fails early, naming the registry but never the secret.
// Reads of one repository share a Client: a Pool hands out one per
// repository (ClientFor).
func NewClient(ctx context.Context, repo string, opts []Option, fopts ...FetchOption) (*Client, error) {
	return newClient(ctx, repo, MakeOptions(opts), fopts...)
}

func newClient(ctx context.Context, repo string, o *Options, fopts ...FetchOption) (*Client, error) {
	// The one rule for names (NormalizeName): a Docker Hub short name is
	// docker.io/library/….
	ref, err := o.ParseName(repo)
	if err != nil {
		return nil, fmt.Errorf("repository %q: %v", repo, err)
	}
	r := ref.Context()
	if ms := o.Mirrors(r.RegistryStr()); len(ms) > 0 && !o.push {
		return newMirrored(r, ms, o, append(o.fetch[:len(o.fetch):len(o.fetch)], fopts...)), nil
	}
	scope := transport.PullScope
	if o.push {
		scope = transport.PushScope // push and pull
	}
	rt, err := o.registryTransport(ctx, r.Registry, []string{r.Scope(scope)})
	if err != nil {
		return nil, fmt.Errorf("repository %q: %w", repo, err)
	}
	f := &Client{
		repo:        r,
		base:        fmt.Sprintf("%s://%s/v2/%s/", r.Registry.Scheme(), r.RegistryStr(), r.RepositoryStr()),
		rt:          rt,
		client:      &http.Client{Transport: rt},
		push:        o.push,
		retryPolicy: defaultRetryPolicy(),
	}
	for _, fo := range append(o.fetch[:len(o.fetch):len(o.fetch)], fopts...) {
		fo(f)
	}
	return f, nil
}

// Repository is the repository the Client reads.
func (f *Client) Repository() name.Repository { return f.repo }

// Requests is the number of HTTP requests sent so far.
func (f *Client) Requests() int {
	if f.m != nil {
		return f.m.requests()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// Size asks the registry for a blob's size (HEAD).
func (f *Client) Size(ctx context.Context, dgst v1.Hash) (int64, error) {
	if f.m != nil {
		return f.m.size(ctx, dgst)
	}
	resp, err := f.do(ctx, http.MethodHead, dgst, "")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.ContentLength < 0 {
		return 0, fmt.Errorf("blob %s: registry sent no Content-Length", dgst)
	}
	return resp.ContentLength, nil
}

// Open returns the blob's bytes [off, off+n); n < 0 means to the end (pass
// the size when it is known: it saves a HEAD request on resume). The
// caller verifies the digest (NewVerifyReader) once it has every byte.
//
// A registry that ignores Range and answers 200 with the whole blob is
// tolerated: the first off bytes are skipped here, so the caller still sees
// exactly the range it asked for (at the cost of the skipped transfer).
func (f *Client) Open(ctx context.Context, dgst v1.Hash, off, n int64) (io.ReadCloser, error) {
	if f.m != nil {
		return f.m.open(ctx, dgst, off, n)
	}
	rc, err := f.open(ctx, dgst, off, n)
	if err != nil {
		return nil, err
	}
	return &resumingBody{f: f, ctx: ctx, dgst: dgst, off: off, n: n, rc: rc}, nil
}

// resumingBody is a blob range that survives broken bodies: a read error
// other than the context's is retried after the policy's backoff by asking
// for the bytes not yet read.
type resumingBody struct {
	f    *Client
	ctx  context.Context
	dgst v1.Hash
	off  int64 // where the range starts
	n    int64 // its length, < 0: to the end
	read int64 // bytes handed out
	rc   io.ReadCloser
	// pending is a read error held back while its bytes are handed out.
	pending error
	// retried counts the resumes; the budget is the Client's retries.
	retried int
}

func (b *resumingBody) Read(p []byte) (int, error) {
	for {
		if b.rc == nil {
			return 0, io.ErrClosedPipe
		}
		var k int
		err := b.pending
		b.pending = nil
		if err == nil {
			k, err = b.rc.Read(p)
			b.read += int64(k)
		}
		if err == io.EOF && b.n > 0 && b.read < b.n {
			err = io.ErrUnexpectedEOF // the range ended short
		}
		if err == nil || err == io.EOF {
			return k, err
		}
		if k > 0 {
			b.pending = err // hand out the bytes; resume on the next read
			return k, nil
		}
		if b.ctx.Err() != nil {
			return 0, err
		}
		if b.retried >= b.f.retries {
			return 0, fmt.Errorf("blob %s: transfer broke at byte %d: %w (after %d attempts)", b.dgst, b.off+b.read, RedactError(err), b.retried+1)
		}
		if serr := b.f.sleep(b.ctx, b.f.wait(b.retried, 0)); serr != nil {
			return 0, serr
		}
		b.retried++
		b.rc.Close()
		b.rc = nil
		rest := int64(-1)
		if b.n > 0 {
			rest = b.n - b.read
		}
		rc, oerr := b.f.open(b.ctx, b.dgst, b.off+b.read, rest)
		if oerr != nil {
			return 0, oerr
		}
		b.rc = rc
	}
}

func (b *resumingBody) Close() error {
	if b.rc == nil {
		return nil
	}
	err := b.rc.Close()
	b.rc = nil
	return err
}

// retryPolicy is kiln's one retry policy for network reads: the Client's
// blob requests and HTTPClient's GETs share it, so a flaky mirror is
// treated the same whichever command reads from it.
type retryPolicy struct {
	retries int
	backoff time.Duration
	maxWait time.Duration
	sleep   func(context.Context, time.Duration) error
}

func defaultRetryPolicy() retryPolicy {
	return retryPolicy{retries: 5, backoff: 200 * time.Millisecond, maxWait: 30 * time.Second, sleep: sleepCtx}
}

// wait is the policy's backoff before retry number attempt (0-based):
// backoff doubling per attempt, at least retryAfter, at most maxWait.
func (p *retryPolicy) wait(attempt int, retryAfter time.Duration) time.Duration {
	d := p.backoff
	for i := 0; i < attempt && d < p.maxWait; i++ {
		d *= 2
	}
	d = max(d, retryAfter)
	return min(d, p.maxWait)
}

func (f *Client) open(ctx context.Context, dgst v1.Hash, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n == 0 {
		return nil, fmt.Errorf("blob %s: bad range offset %d length %d", dgst, off, n)
	}
	if off > 0 && n < 0 {
		// Some registries (go-containerregistry's among them) understand
		// only closed ranges: ask for the size once and close the range.
		size, err := f.Size(ctx, dgst)
		if err != nil {
			return nil, err
		}
		if off >= size {
			return nil, fmt.Errorf("blob %s: offset %d is past its size %d", dgst, off, size)
		}
		n = size - off
	}
	rng := ""
	switch {
	case n > 0:
		rng = fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	case off > 0:
		rng = fmt.Sprintf("bytes=%d-", off)
	}
	resp, err := f.do(ctx, http.MethodGet, dgst, rng)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, err := contentRangeStart(resp.Header.Get("Content-Range"))
		if err != nil || start != off {
			resp.Body.Close()
			return nil, fmt.Errorf("blob %s: asked for bytes from %d, registry sent Content-Range %q", dgst, off, resp.Header.Get("Content-Range"))
		}
		return resp.Body, nil
	case http.StatusOK:
		if off > 0 {
			if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
				resp.Body.Close()
				return nil, fmt.Errorf("blob %s: skipping to %d: %v", dgst, off, err)
			}
		}
		if n > 0 {
			return struct {
				io.Reader
				io.Closer
			}{io.LimitReader(resp.Body, n), resp.Body}, nil
		}
		return resp.Body, nil
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("blob %s: registry answered %s", dgst, resp.Status)
	}
}

// StatusError is a registry answer that is not a success.
type StatusError struct {
	Digest v1.Hash
	Code   int
	Status string
	// words says what the answer means, when there is more to say than
	// its status (describe: a blob not found, the storage's refusal).
	words string
}

func (e *StatusError) Error() string {
	if e.words != "" {
		w := e.words
		if !strings.Contains(w, strconv.Itoa(e.Code)) {
			w += "; registry answered " + e.Status
		}
		return NameOnce("blob "+e.Digest.String(), w)
	}
	return fmt.Sprintf("blob %s: registry answered %s", e.Digest, e.Status)
}

func (f *Client) do(ctx context.Context, method string, dgst v1.Hash, rng string) (*http.Response, error) {
	hdr := http.Header{}
	if rng != "" {
		hdr.Set("Range", rng)
	}
	return f.send(ctx, method, f.base+"blobs/"+dgst.String(), hdr, "blob "+dgst.String(), func(resp *http.Response) error {
		defer resp.Body.Close()
		se := &StatusError{Digest: dgst, Code: resp.StatusCode, Status: resp.Status}
		// The answer in words (its body was bounded and redacted by the
		// guarded transport).
		if w, _ := describe(transport.CheckError(resp, http.StatusOK, http.StatusPartialContent), ""); w != "" {
			se.words = redact.String(w)
		}
		return se
	})
}

// send makes a request under the retry policy: connection errors, 429
// (after its Retry-After) and 5xx answers are retried; 200 and 206 are
// handed back; any other answer is refused with refuse's error (which
// closes the body). what names the request in an error.
func (f *Client) send(ctx context.Context, method, url string, hdr http.Header, what string, refuse func(*http.Response) error) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			return nil, err
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		f.mu.Lock()
		f.requests++
		f.mu.Unlock()
		resp, err := f.client.Do(req)
		retryAfter := time.Duration(0)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			err = fmt.Errorf("%s: %w", what, RedactError(redactURL(err)))
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			err = refuse(resp)
		case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent:
			return resp, nil
		default:
			return nil, refuse(resp)
		}
		if attempt >= f.retries {
			return nil, fmt.Errorf("%w (after %d attempts)", err, attempt+1)
		}
		if err := f.sleep(ctx, f.wait(attempt, retryAfter)); err != nil {
			return nil, err
		}
	}
}

// redactURL keeps the error's message but not a URL's query string, where
// some registries put signed tokens.
func redactURL(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "?"); i >= 0 {
		if j := strings.IndexAny(msg[i:], "\": "); j >= 0 {
			msg = msg[:i] + msg[i+j:]
		} else {
			msg = msg[:i]
		}
	}
	return &redactedError{msg: msg, err: err}
}

// parseRetryAfter reads delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func contentRangeStart(v string) (int64, error) {
	// "bytes START-END/TOTAL"
	v = strings.TrimPrefix(strings.TrimSpace(v), "bytes ")
	s, _, ok := strings.Cut(v, "-")
	if !ok {
		return 0, fmt.Errorf("bad Content-Range %q", v)
	}
	return strconv.ParseInt(s, 10, 64)
}

// Sleep waits d, or until ctx ends (its error then): every backoff in
// kiln waits through it, so a signal always ends the wait.
func Sleep(ctx context.Context, d time.Duration) error { return sleepCtx(ctx, d) }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// NewClient is NewClient under o.
func (o *Options) NewClient(ctx context.Context, repo string, fopts ...FetchOption) (*Client, error) {
	return newClient(ctx, repo, o, fopts...)
}
