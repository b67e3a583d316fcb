package testimage

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TokenAuth puts a registry handler behind Docker's token authentication
// (a 401 with a Bearer challenge, a token endpoint at /token) and counts
// the token exchanges: what a client pays per login. Any credentials, or
// none, get a token; a request without one is answered 401.
type TokenAuth struct {
	Next http.Handler
	// URL is the server's, set by Start.
	URL string

	mu        sync.Mutex
	exchanges map[string]int // repository -> token requests naming it
}

// StartTokenAuth serves next behind token authentication until the test
// ends; the host is strings.TrimPrefix(ta.URL, "http://").
func StartTokenAuth(t testing.TB, next http.Handler) *TokenAuth {
	ta := &TokenAuth{Next: next}
	srv := httptest.NewServer(ta)
	t.Cleanup(srv.Close)
	ta.URL = srv.URL
	return ta
}

// Host is the registry's host:port.
func (ta *TokenAuth) Host() string { return strings.TrimPrefix(ta.URL, "http://") }

const testToken = "kiln-test-token"

func (ta *TokenAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/token" {
		ta.mu.Lock()
		if ta.exchanges == nil {
			ta.exchanges = map[string]int{}
		}
		repos := 0
		for _, s := range r.URL.Query()["scope"] {
			for _, one := range strings.Fields(s) {
				if rest, ok := strings.CutPrefix(one, "repository:"); ok {
					if i := strings.LastIndex(rest, ":"); i > 0 {
						ta.exchanges[rest[:i]]++
						repos++
					}
				}
			}
		}
		if repos == 0 {
			ta.exchanges[""]++
		}
		ta.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"token":%q,"access_token":%q}`, testToken, testToken)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="kiln-test"`, ta.URL))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	ta.Next.ServeHTTP(w, r)
}

// Exchanges are the token requests so far, per repository named in their
// scope ("" for those naming none).
func (ta *TokenAuth) Exchanges() map[string]int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	out := map[string]int{}
	for k, v := range ta.exchanges {
		out[k] = v
	}
	return out
}

// Reset forgets the exchanges counted so far.
func (ta *TokenAuth) Reset() {
	ta.mu.Lock()
	ta.exchanges = nil
	ta.mu.Unlock()
}
