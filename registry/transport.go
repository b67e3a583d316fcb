package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/kiln-build/kiln/internal/networds"
	"github.com/kiln-build/kiln/internal/redact"
)

// DefaultIdleTimeout is how long a registry may stay silent mid-request.
const DefaultIdleTimeout = 30 * time.Second

// WithIdleTimeout sets how long a registry may send nothing, while kiln
// waits for an answer or reads a body, before the request fails with
// networds.ErrIdleTimeout (default DefaultIdleTimeout; tests use milliseconds).
func WithIdleTimeout(d time.Duration) Option { return func(o *Options) { o.idle = d } }

// guardTransport is the base of every registry request kiln makes, under
// go-containerregistry's auth and retry layers (RemoteOptions) and the
// Client's, so that analyze, slim, warm and weights all get:
//
//   - an idle timeout: waiting for the answer to a request without a body,
//     and every read of a response body, fail after idle of silence (a
//     request with a body is timed while its body is sent, not while the
//     registry digests an upload);
//   - redacted error bodies: a non-2xx body is read (bounded) and handed on
//     with credentials removed, so the errors made from it are clean.
type guardTransport struct {
	inner http.RoundTripper
	idle  time.Duration
	// rate is the slowest body kiln waits on (0: DefaultMinRate).
	rate minRate
}

// minRate is the slowest a response body may arrive: fewer than Bytes
// per second over Window of waiting on the registry fails the read with
// ErrTooSlow. Time the caller spends between reads does not count.
type minRate struct {
	Bytes  int64
	Window time.Duration
}

// DefaultMinRate: 8 KiB/s over a minute of waiting. A link that slow
// would take a day for a CUDA image; a body trickling a byte every 25 s
// (under any idle timeout) ends within a minute and is retried.
var DefaultMinRate = minRate{Bytes: 8 << 10, Window: time.Minute}

// ErrTooSlow is returned (wrapped) when a response body arrives slower
// than the minimum rate: a registry or proxy that trickles.
var ErrTooSlow = errors.New("registry sends too slowly")

// WithMinRate sets the slowest transfer kiln waits on: fewer than
// bytesPerSec over window of waiting fails with ErrTooSlow (retried like
// an idle timeout). Tests use small windows.
func WithMinRate(bytesPerSec int64, window time.Duration) Option {
	return func(o *Options) { o.rate = minRate{Bytes: bytesPerSec, Window: window} }
}

// roundTripper is the transport kiln hands to every registry client.
func (o *Options) roundTripper() http.RoundTripper {
	if g, ok := o.transport.(*guardTransport); ok {
		return g
	}
	return &guardTransport{inner: o.transport, idle: o.idle, rate: o.rate}
}

// RegistryTransport is an authenticated transport to reg with pull access
// to scopes, for packages that make registry requests themselves (a proxy
// to the registry): kiln's keychain (credential helpers time-limited, their
// output never quoted, secrets redacted) and guarded transport (idle
// timeout, redacted error bodies), the ones every Client uses. The token
// exchange happens here, so a bad credential fails early.
func RegistryTransport(ctx context.Context, reg name.Registry, scopes []string, opts ...Option) (http.RoundTripper, error) {
	return MakeOptions(opts).registryTransport(ctx, reg, scopes)
}

func (o *Options) registryTransport(ctx context.Context, reg name.Registry, scopes []string) (http.RoundTripper, error) {
	auth, err := authn.Resolve(ctx, o.keychain, reg)
	if err != nil {
		// The message only: it is redacted, what it wraps may not be.
		return nil, errors.New(err.Error())
	}
	rt, err := transport.NewWithContext(ctx, reg, auth, o.roundTripper(), scopes)
	if err != nil {
		return nil, RedactError(err)
	}
	return rt, nil
}

func (t *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	redact.RememberAuthorization(req.Header.Get("Authorization"))
	redact.RememberSignedURL(req.URL)
	if t.idle <= 0 {
		resp, err := t.inner.RoundTrip(req)
		if err != nil {
			return nil, redactErrorAt(err, req.URL.Host)
		}
		t.inspect(req, resp)
		return redactErrorBody(resp), nil
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	it := &idleTimer{idle: t.idle, cancel: cancel}
	it.arm()
	r2 := req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		r2.Body = &sendBody{ReadCloser: req.Body, t: it}
	}
	resp, err := t.inner.RoundTrip(r2)
	if err != nil {
		it.stop()
		timedOut := errors.Is(context.Cause(ctx), networds.ErrIdleTimeout)
		cancel(nil)
		if timedOut {
			u := *req.URL
			u.User, u.RawQuery = nil, ""
			return nil, fmt.Errorf("%s %s: %w for %s waiting for the answer", req.Method, u.String(), networds.ErrIdleTimeout, t.idle)
		}
		return nil, redactErrorAt(err, req.URL.Host)
	}
	t.inspect(req, resp)
	if resp.StatusCode >= 400 {
		resp = redactErrorBody(resp) // still timed: the body is read here
	}
	it.stop()
	rate := t.rate
	if rate.Bytes <= 0 || rate.Window <= 0 {
		rate = DefaultMinRate
	}
	resp.Body = &idleBody{rc: resp.Body, t: it, ctx: ctx, cancel: cancel, rate: rate}
	return resp, nil
}

// inspect learns from an answer what errors will need: the query of a
// redirect (a signed URL, redacted from then on), the registry behind a
// token server, and how to list tags when a tag is not found.
func (t *guardTransport) inspect(req *http.Request, resp *http.Response) {
	if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		if u, err := req.URL.Parse(loc); err == nil {
			redact.RememberRedirect(u)
		}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		rememberRealm(resp)
	}
	t.withTagLister(req, resp)
}

// idleTimer cancels a request after idle without progress.
type idleTimer struct {
	idle   time.Duration
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	t      *time.Timer
}

func (it *idleTimer) arm() {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.t == nil {
		it.t = time.AfterFunc(it.idle, func() { it.cancel(networds.ErrIdleTimeout) })
		return
	}
	it.t.Reset(it.idle)
}

func (it *idleTimer) stop() {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.t != nil {
		it.t.Stop()
	}
}

// sendBody keeps the timer armed while a request body is being sent:
// each read the transport makes is progress. At its end the timer stops.
type sendBody struct {
	io.ReadCloser
	t *idleTimer
}

func (b *sendBody) Read(p []byte) (int, error) {
	b.t.arm()
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.t.stop()
	}
	return n, err
}

// idleBody times each read of a response body: only the registry's
// silence counts, not the time the caller takes between reads.
type idleBody struct {
	rc     io.ReadCloser
	t      *idleTimer
	ctx    context.Context
	cancel context.CancelCauseFunc
	// The minimum rate: bytes received and time spent waiting in the
	// current window.
	rate   minRate
	got    int64
	waited time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.t.arm()
	start := time.Now()
	n, err := b.rc.Read(p)
	b.t.stop()
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), networds.ErrIdleTimeout) {
		err = fmt.Errorf("%w for %s mid-body", networds.ErrIdleTimeout, b.t.idle)
	}
	// Each window of waiting must have brought its bytes: the idle timer
	// alone resets on every byte, so a trickle would hold kiln for ever.
	b.got += int64(n)
	b.waited += time.Since(start)
	if err == nil && b.waited >= b.rate.Window {
		if want := int64(b.rate.Window.Seconds() * float64(b.rate.Bytes)); b.got < want {
			b.cancel(ErrTooSlow)
			return n, fmt.Errorf("%w: %d bytes in %s of waiting, below %d bytes/s", ErrTooSlow, b.got, b.waited.Round(time.Second), b.rate.Bytes)
		}
		b.got, b.waited = 0, 0
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.t.stop()
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

// maxErrorBody bounds how much of an error answer is kept.
const maxErrorBody = 64 << 10

// redactErrorBody replaces a non-2xx (non-3xx) answer's body by its first
// maxErrorBody bytes, redacted.
func redactErrorBody(resp *http.Response) *http.Response {
	if resp.StatusCode < 400 || resp.Body == nil {
		return resp
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	clean := []byte(redact.String(string(b)))
	resp.Body = io.NopCloser(bytes.NewReader(clean))
	resp.ContentLength = int64(len(clean))
	if resp.Header.Get("Content-Length") != "" {
		// A proxy hands the header on: it must name the body it sends.
		resp.Header.Set("Content-Length", strconv.Itoa(len(clean)))
	}
	return resp
}
