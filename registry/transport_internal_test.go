package registry

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An error body redacted by the guarded transport keeps its headers true:
// a proxy (fleet's push mode) copies Content-Length to its client, which
// would wait for bytes that redaction removed.
func TestRedactedErrorBodyContentLength(t *testing.T) {
	const authz = "Bearer tok-0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := `{"errors":[{"code":"DENIED","message":"no access for ` + r.Header.Get("Authorization") + `"}]}`
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, body)
	}))
	defer srv.Close()
	rt := &guardTransport{inner: http.DefaultTransport, idle: time.Second}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v2/", nil)
	req.Header.Set("Authorization", authz)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "tok-0123456789abcdef") {
		t.Errorf("body not redacted: %s", b)
	}
	if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(len(b)) || resp.ContentLength != int64(len(b)) {
		t.Errorf("Content-Length header %q, field %d, body %d bytes", got, resp.ContentLength, len(b))
	}
}

// D7: a body trickling a byte at a time, each under the idle timeout,
// held warm for ever (the idle timer resets on every read). Below the
// minimum rate over a window of waiting, the read fails with ErrTooSlow
// (and the Client resumes or gives up within its budget). Time the
// caller spends between reads does not count against the registry.
func TestTrickleFailsMinimumRate(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(http.StatusOK)
		for i := 0; i < 100000; i++ {
			if _, err := w.Write([]byte{'x'}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	rt := &guardTransport{inner: http.DefaultTransport, idle: time.Second, rate: minRate{Bytes: 4 << 10, Window: 300 * time.Millisecond}}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v2/r/blobs/sha256:x", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if !errors.Is(err, ErrTooSlow) {
		t.Fatalf("read %d bytes of a trickle: err = %v", n, err)
	}

	// A fast registry and a slow reader: no error.
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("y", 64<<10))
	}))
	defer fast.Close()
	req, _ = http.NewRequest(http.MethodGet, fast.URL+"/v2/r/blobs/sha256:y", nil)
	resp, err = rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4<<10)
	total := 0
	for {
		k, err := resp.Body.Read(buf)
		total += k
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("slow reader of a fast registry: %v after %d bytes", err, total)
		}
		time.Sleep(40 * time.Millisecond)
	}
}
