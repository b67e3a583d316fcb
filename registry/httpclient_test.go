package registry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/networds"
	"github.com/kiln-build/kiln/registry"
)

func TestHTTPClientRetriesIdleTimeoutAndRedaction(t *testing.T) {
	var n, down atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flaky":
			if n.Add(1) <= 2 {
				w.Header().Set("Retry-After", "0")
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ok")
		case "/stall":
			n.Add(1)
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/echo":
			// A server that echoes the request's credentials in its error.
			http.Error(w, "denied: Authorization: "+r.Header.Get("Authorization"), http.StatusForbidden)
		case "/down":
			down.Add(1)
			http.Error(w, "down", http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	// The stall needs a short idle timeout; every other answer comes at
	// once, and gets a timeout that a loaded machine (CI's tiers side by
	// side) cannot miss, so that no request is given up before its
	// handler counts it.
	stallc := registry.HTTPClient([]registry.Option{registry.WithIdleTimeout(50 * time.Millisecond)}, registry.WithRetries(3, time.Millisecond))
	c := registry.HTTPClient([]registry.Option{registry.WithIdleTimeout(10 * time.Second)}, registry.WithRetries(3, time.Millisecond))

	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if path == "/stall" {
			return stallc.Do(req)
		}
		return c.Do(req)
	}

	n.Store(0)
	resp, err := get("/flaky")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" || n.Load() != 3 {
		t.Errorf("flaky: %q after %d requests, want ok after 3", b, n.Load())
	}

	n.Store(0)
	// Four attempts, each given up after the idle timeout (a handler may
	// start after its request was given up: the count is the client's).
	if _, err := get("/stall"); err == nil || !errors.Is(err, networds.ErrIdleTimeout) || !strings.Contains(err.Error(), "after 4 attempts") {
		t.Errorf("stall: %v after %d requests", err, n.Load())
	}

	// The last 5xx answer is handed back once the budget is spent (its
	// own count: a stalled handler the server started late adds to n).
	resp, err = get("/down")
	if err != nil || resp.StatusCode != http.StatusBadGateway || down.Load() != 4 {
		t.Errorf("down: %v %v after %d requests", resp, err, down.Load())
	}
	if resp != nil {
		resp.Body.Close()
	}

	u := strings.Replace(srv.URL, "http://", "http://alice:s3cretpass@", 1) + "/echo"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "s3cretpass") || strings.Contains(string(b), "YWxpY2U6czNjcmV0cGFzcw") || !strings.Contains(string(b), "[REDACTED]") {
		t.Errorf("echoed credentials not redacted: %q", b)
	}
}
