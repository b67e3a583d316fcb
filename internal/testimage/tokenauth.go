package testimage

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// TokenAuth puts a registry handler behind Docker's token authentication
// (a 401 with a Bearer challenge, a token endpoint at /token) and counts
// the token exchanges: what a client pays per login. Any credentials, or
// none, get a token for the scopes asked; a request without one is
// answered 401, and so is a write (anything but GET and HEAD) to a
// repository its token was not granted push on, with the challenge naming
// the scope wanted, as the distribution registry answers (a client that
// logged in to pull pays a second exchange to push).
type TokenAuth struct {
	Next http.Handler
	// URL is the server's, set by Start.
	URL string

	mu        sync.Mutex
	exchanges map[string]int               // repository -> token requests naming it
	scopes    []string                     // every scope asked, in order
	tokens    map[string]map[string]string // token -> repository -> actions granted
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

func (ta *TokenAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/token" {
		ta.mu.Lock()
		if ta.exchanges == nil {
			ta.exchanges = map[string]int{}
		}
		if ta.tokens == nil {
			ta.tokens = map[string]map[string]string{}
		}
		granted := map[string]string{}
		for _, s := range r.URL.Query()["scope"] {
			for _, one := range strings.Fields(s) {
				ta.scopes = append(ta.scopes, one)
				if rest, ok := strings.CutPrefix(one, "repository:"); ok {
					if i := strings.LastIndex(rest, ":"); i > 0 {
						ta.exchanges[rest[:i]]++
						granted[rest[:i]] += "," + rest[i+1:]
					}
				}
			}
		}
		if len(granted) == 0 {
			ta.exchanges[""]++
		}
		tok := fmt.Sprintf("kiln-test-token-%d", len(ta.tokens))
		ta.tokens[tok] = granted
		ta.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"token":%q,"access_token":%q}`, tok, tok)
		return
	}
	challenge := fmt.Sprintf(`Bearer realm="%s/token",service="kiln-test"`, ta.URL)
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	ta.mu.Lock()
	granted, ok := ta.tokens[tok]
	ta.mu.Unlock()
	if !ok {
		w.Header().Set("WWW-Authenticate", challenge)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if repo := pathRepository(r.URL.Path); repo != "" && r.Method != http.MethodGet && r.Method != http.MethodHead &&
		!slices.Contains(strings.Split(granted[repo], ","), "push") {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`%s,scope="repository:%s:pull,push",error="insufficient_scope"`, challenge, repo))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	ta.Next.ServeHTTP(w, r)
}

// pathRepository is the repository a /v2/ request path names ("" for
// none: the ping, the catalog).
func pathRepository(p string) string {
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return ""
	}
	for _, sep := range []string{"/blobs/", "/manifests/", "/tags/", "/referrers/"} {
		if i := strings.LastIndex(rest, sep); i > 0 {
			return rest[:i]
		}
	}
	return ""
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

// Scopes are the scopes the token requests so far asked for, in order
// (repository:kiln/wheels:pull,push).
func (ta *TokenAuth) Scopes() []string {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return slices.Clone(ta.scopes)
}

// Reset forgets the exchanges counted so far.
func (ta *TokenAuth) Reset() {
	ta.mu.Lock()
	ta.exchanges, ta.scopes = nil, nil
	ta.mu.Unlock()
}

// TokenRegistry is an in-process registry (go-containerregistry's, quiet;
// with the referrers API when referrers is set) behind token
// authentication: the registry the one-login-per-repository tests count
// token exchanges on.
func TokenRegistry(t testing.TB, referrers bool) *TokenAuth {
	t.Helper()
	return StartTokenAuth(t, registry.New(registry.WithReferrersSupport(referrers), registry.Logger(log.New(io.Discard, "", 0))))
}
