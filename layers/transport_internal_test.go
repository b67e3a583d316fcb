package layers

import (
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
