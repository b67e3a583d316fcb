package registry

import (
	"fmt"
	"net/http"
	"time"
)

// HTTPClient is the client for kiln's plain HTTP reads outside registries
// (PEP 503/691 wheel indexes, release notes): the same guarded transport
// every registry request goes through (an idle timeout on the answer and on
// every body read; error bodies redacted; errors redacted) under the same
// retry policy as the Client (connection errors, idle timeouts, 5xx and
// 429 retried with doubling backoff, Retry-After honoured, a budget of
// WithRetries attempts). Only GET and HEAD requests without a body are
// retried: those are the only ones that are safe to send twice.
//
// opts supplies the base transport (WithTransport) and the idle timeout
// (WithIdleTimeout); fopts the retry budget and backoff (WithRetries,
// WithMaxWait). The keychain is not used: these hosts are not registries.
func HTTPClient(opts []Option, fopts ...FetchOption) *http.Client {
	o := MakeOptions(opts)
	// FetchOptions set a Client's policy; read it back from a scratch one
	// so that both kinds of client take the same options.
	f := &Client{retryPolicy: defaultRetryPolicy()}
	for _, fo := range append(o.fetch[:len(o.fetch):len(o.fetch)], fopts...) {
		fo(f)
	}
	return &http.Client{Transport: &retryTransport{inner: o.roundTripper(), policy: f.retryPolicy}}
}

type retryTransport struct {
	inner  http.RoundTripper
	policy retryPolicy
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	idempotent := (req.Method == http.MethodGet || req.Method == http.MethodHead) && (req.Body == nil || req.Body == http.NoBody)
	if !idempotent {
		return t.inner.RoundTrip(req)
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		resp, err := t.inner.RoundTrip(req)
		retryAfter := time.Duration(0)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, err
			}
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			if attempt >= t.policy.retries {
				// The caller sees the last answer itself (its body is
				// redacted by the guarded transport).
				return resp, nil
			}
			retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			resp.Body.Close()
		default:
			return resp, nil
		}
		if err != nil && attempt >= t.policy.retries {
			// http.Client names the URL (without its password); the
			// transport's error is already redacted.
			return nil, fmt.Errorf("%w (after %d attempts)", RedactError(redactURL(err)), attempt+1)
		}
		if serr := t.policy.sleep(ctx, t.policy.wait(attempt, retryAfter)); serr != nil {
			return nil, serr
		}
	}
}
