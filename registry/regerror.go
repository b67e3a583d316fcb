package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/cli/cli/config"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/kiln-build/kiln/internal/networds"
)

// Registry errors in words. go-containerregistry reports what the registry
// sent (`MANIFEST_UNKNOWN: manifest unknown; map[Tag:nope]`) and what the
// network did (`dial tcp ...: connect: connection refused`); RedactError,
// the one place registry errors are formed into kiln's, says instead what
// happened and what to do:
//
//	tag "nope" not found in REG/REPO (tags: v1, v2)
//	manifest sha256:… not found in REG/REPO
//	repository REG/REPO not found or you have no access
//	HOST refused the credentials from ~/.docker/config.json (401 Unauthorized): run docker login HOST
//	HOST needs credentials for REPO (401 Unauthorized): run docker login HOST
//	HOST speaks plain HTTP, not HTTPS: pass --insecure-registry HOST
//
// Missing and wrong credentials are told apart by what the keychain
// handed out for the host (credentialSource). A tag that is not found is
// answered with a few of the repository's tags, listed once, bounded, with
// the credential of the request that failed (tagLister).

// credentialSources records, per registry host, where the credentials the
// keychain handed out came from; a host absent had none.
var credentialSources sync.Map // host -> string

func rememberCredentialSource(host, source string) { credentialSources.Store(host, source) }

// credentialSource says where the credentials for host came from ("" when
// the keychain had none).
func credentialSource(host string) string {
	if s, ok := credentialSources.Load(host); ok {
		return s.(string)
	}
	return ""
}

// dockerConfigPath is the Docker config file as a person would write it.
func dockerConfigPath() string {
	p := filepath.Join(config.Dir(), config.ConfigFileName)
	if home, err := os.UserHomeDir(); err == nil && home != "" && strings.HasPrefix(p, home+string(filepath.Separator)) {
		p = "~" + p[len(home):]
	}
	return p
}

// realms maps a token server's host to the registry that named it in its
// challenge: a token endpoint's refusal is the registry's.
var realms sync.Map // token host -> registry host

var realmRe = regexp.MustCompile(`(?i)realm="([^"]+)"`)

func rememberRealm(resp *http.Response) {
	if resp.Request == nil || resp.Request.URL == nil {
		return
	}
	for _, h := range resp.Header.Values("WWW-Authenticate") {
		if m := realmRe.FindStringSubmatch(h); m != nil {
			if u, err := url.Parse(m[1]); err == nil && u.Host != "" && u.Host != resp.Request.URL.Host {
				realms.Store(u.Host, resp.Request.URL.Host)
			}
		}
	}
}

func tokenRegistry(host string) string {
	if r, ok := realms.Load(host); ok {
		return r.(string)
	}
	return host
}

// displayHost names a registry host the way a person writes it.
func displayHost(host string) string {
	if host == name.DefaultRegistry || host == "registry-1.docker.io" {
		return "docker.io"
	}
	return host
}

func isDockerHub(host string) bool { return displayHost(host) == "docker.io" }

// tagListerKey carries, on the request of a manifest answered 404, the
// function that lists the repository's tags.
type tagListerKey struct{}

// maxTagsShown bounds the tags an error names; maxTagList the listing read.
const (
	maxTagsShown = 6
	maxTagList   = 1000
	maxTagBody   = 256 << 10
)

// withTagLister attaches a lister to resp's request when resp is a 404 for
// a manifest by tag: the listing is made only if the error is printed,
// once, with the failed request's Authorization (a pull token for the
// repository), through the same guarded transport.
func (t *guardTransport) withTagLister(req *http.Request, resp *http.Response) {
	if resp.StatusCode != http.StatusNotFound || resp.Request == nil || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		return
	}
	repo, kind, ref := splitV2Path(req.URL.Path)
	if kind != "manifests" || repo == "" || strings.Contains(ref, ":") {
		return
	}
	list := *req.URL
	list.Path = "/v2/" + repo + "/tags/list"
	list.RawQuery = fmt.Sprintf("n=%d", maxTagList)
	authz := req.Header.Get("Authorization")
	ctx := context.WithoutCancel(req.Context())
	inner := &guardTransport{inner: t.inner, idle: t.idle}
	lister := sync.OnceValues(func() ([]string, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lreq, err := http.NewRequestWithContext(ctx, http.MethodGet, list.String(), nil)
		if err != nil {
			return nil, err
		}
		if authz != "" {
			lreq.Header.Set("Authorization", authz)
		}
		lresp, err := inner.RoundTrip(lreq)
		if err != nil {
			return nil, err
		}
		defer lresp.Body.Close()
		if lresp.StatusCode != http.StatusOK {
			return nil, transport.CheckError(lresp, http.StatusOK)
		}
		var tl struct {
			Tags []string `json:"tags"`
		}
		if err := json.NewDecoder(io.LimitReader(lresp.Body, maxTagBody)).Decode(&tl); err != nil {
			return nil, err
		}
		return tl.Tags, nil
	})
	resp.Request = resp.Request.WithContext(context.WithValue(resp.Request.Context(), tagListerKey{}, lister))
}

// splitV2Path splits /v2/REPO/KIND/REF (KIND: manifests, blobs, tags).
func splitV2Path(p string) (repo, kind, ref string) {
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return "", "", ""
	}
	for _, k := range []string{"manifests", "blobs", "tags", "referrers"} {
		if i := strings.LastIndex(rest, "/"+k+"/"); i > 0 {
			return rest[:i], k, rest[i+len(k)+2:]
		}
	}
	return "", "", ""
}

// scopeRepo reads REPO from a token request's scope=repository:REPO:ACTIONS.
func scopeRepo(u *url.URL) string {
	for _, s := range u.Query()["scope"] {
		if r, ok := strings.CutPrefix(s, "repository:"); ok {
			if i := strings.LastIndex(r, ":"); i > 0 {
				return r[:i]
			}
		}
	}
	return ""
}

// describe says in words what err means, for the registry and network
// errors a person meets; "" when it has no better words than err's own.
// inner is the part of err's message the words replace; host names the
// server when err does not (a transport's error, before http.Client wraps
// it with the URL).
func describe(err error, host string) (words, inner string) {
	var te *transport.Error
	if errors.As(err, &te) {
		if w := describeStatus(te); w != "" {
			return w, te.Error()
		}
	}
	return describeNet(err, host)
}

func hasCode(te *transport.Error, codes ...transport.ErrorCode) bool {
	for _, d := range te.Errors {
		for _, c := range codes {
			if d.Code == c {
				return true
			}
		}
	}
	return false
}

func describeStatus(te *transport.Error) string {
	if te.Request == nil || te.Request.URL == nil {
		return ""
	}
	u := te.Request.URL
	repo, kind, ref := splitV2Path(u.Path)
	host := u.Host
	status := fmt.Sprintf("%d %s", te.StatusCode, http.StatusText(te.StatusCode))
	switch {
	case te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden || hasCode(te, transport.UnauthorizedErrorCode, transport.DeniedErrorCode):
		if repo == "" && !strings.HasPrefix(u.Path, "/v2/") {
			// A token endpoint: the registry that sent kiln there.
			if r := scopeRepo(u); r != "" || tokenRegistry(host) != host {
				repo, host = r, tokenRegistry(host)
			} else {
				return storageWords(te, status)
			}
		}
		return authWords(host, repo, te.Request.Method, status)
	case te.StatusCode == http.StatusTooManyRequests || hasCode(te, transport.TooManyRequestsErrorCode):
		return fmt.Sprintf("%s limits how often it may be asked (%s): wait and run again; if you are not logged in, docker login %s raises the limit", displayHost(host), status, displayHost(host))
	case kind == "manifests" && (te.StatusCode == http.StatusNotFound || hasCode(te, transport.ManifestUnknownErrorCode)) && !hasCode(te, transport.NameUnknownErrorCode):
		where := displayHost(host) + "/" + repo
		if strings.Contains(ref, ":") {
			return fmt.Sprintf("manifest %s not found in %s", ref, where)
		}
		return fmt.Sprintf("tag %q not found in %s%s", ref, where, tagsNote(te, ref))
	case hasCode(te, transport.NameUnknownErrorCode) && repo != "":
		return fmt.Sprintf("repository %s/%s not found or you have no access", displayHost(host), repo)
	case kind == "blobs" && (te.StatusCode == http.StatusNotFound || hasCode(te, transport.BlobUnknownErrorCode)):
		return fmt.Sprintf("blob %s not found in %s/%s (the registry lost it, or the image names a blob it never had)", ref, displayHost(host), repo)
	case !strings.HasPrefix(u.Path, "/v2/"):
		return storageWords(te, status)
	}
	return ""
}

// authWords tells missing credentials from refused ones.
func authWords(host, repo, method, status string) string {
	reg := displayHost(host)
	login := "docker login " + reg
	if isDockerHub(host) {
		login = "docker login"
	}
	what := ""
	if repo != "" {
		what = " for " + repo
	}
	src := credentialSource(host)
	if src == "" {
		if isDockerHub(host) && (method == http.MethodGet || method == http.MethodHead) {
			return fmt.Sprintf("repository docker.io/%s not found, or it needs credentials (%s): check the name, or run %s", repo, status, login)
		}
		return fmt.Sprintf("%s needs credentials%s (%s): run %s", reg, what, status, login)
	}
	if strings.HasPrefix(status, "403") {
		return fmt.Sprintf("%s denied%s the credentials from %s (%s): check the name and your access, or run %s", reg, what, src, status, login)
	}
	return fmt.Sprintf("%s refused the credentials from %s (%s): run %s", reg, src, status, login)
}

// storageWords describes an answer from a server outside the registry API:
// the blob storage a registry redirected to. Its body is not quoted (it
// echoes the signed request); an S3-style Code and Message are.
func storageWords(te *transport.Error, status string) string {
	w := fmt.Sprintf("%s (the storage the registry sent kiln to) answered %s", te.Request.URL.Host, status)
	raw := rawBody(te)
	if code := xmlField(raw, "Code"); code != "" {
		w += ": " + code
		if m := xmlField(raw, "Message"); m != "" {
			w += ": " + m
		}
	}
	if te.StatusCode == http.StatusForbidden {
		w += " (a signed link that expired, or a clock far off?)"
	}
	return w
}

// rawBody is the body go-containerregistry kept (it prints it).
func rawBody(te *transport.Error) string {
	msg := te.Error()
	if _, after, ok := strings.Cut(msg, http.StatusText(te.StatusCode)+": "); ok {
		return after
	}
	return ""
}

func xmlField(s, field string) string {
	_, after, ok := strings.Cut(s, "<"+field+">")
	if !ok {
		return ""
	}
	v, _, ok := strings.Cut(after, "</"+field+">")
	if !ok || len(v) > 300 {
		return ""
	}
	return strings.TrimSpace(v)
}

// tagsNote lists a few of the repository's tags (" (tags: a, b, …)"),
// those sharing the longest prefix with the tag asked for first, or says
// it has none; "" when they cannot be listed.
func tagsNote(te *transport.Error, want string) string {
	lister, ok := te.Request.Context().Value(tagListerKey{}).(func() ([]string, error))
	if !ok {
		return ""
	}
	tags, err := lister()
	var le *transport.Error
	switch {
	case errors.As(err, &le) && (le.StatusCode == http.StatusNotFound || hasCode(le, transport.NameUnknownErrorCode)):
		return " (no such repository)"
	case err != nil:
		return ""
	case len(tags) == 0:
		return " (the repository has no tags)"
	case len(tags) <= maxTagsShown:
		return " (tags: " + strings.Join(tags, ", ") + ")"
	}
	near := slices.Clone(tags)
	slices.SortStableFunc(near, func(a, b string) int { return commonPrefix(b, want) - commonPrefix(a, want) })
	all := fmt.Sprintf("%d in all", len(tags))
	if len(tags) >= maxTagList {
		all = fmt.Sprintf("more than %d", maxTagList)
	}
	return fmt.Sprintf(" (tags: %s, … %s)", strings.Join(near[:maxTagsShown], ", "), all)
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// describeNet says what a failed connection means.
func describeNet(err error, host string) (words, inner string) {
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Error()
		if u, perr := url.Parse(ue.URL); perr == nil {
			host = u.Host
		}
	}
	var dns *net.DNSError
	var op *net.OpError
	var x509Unknown x509.UnknownAuthorityError
	var x509Host x509.HostnameError
	var x509Invalid x509.CertificateInvalidError
	var tlsVerify *tls.CertificateVerificationError
	var tlsRecord tls.RecordHeaderError
	switch {
	case errors.As(err, &dns):
		if dns.IsNotFound {
			words = networds.Of(err) + ": check the registry's name"
		} else {
			words = networds.Of(err) + ": check the network or the DNS server"
		}
	case errors.Is(err, syscall.ECONNREFUSED):
		addr := host
		if errors.As(err, &op) && op.Addr != nil {
			addr = op.Addr.String()
		}
		words = fmt.Sprintf("nothing answers at %s (connection refused): is the registry running, and on that port?", addr)
	case host == "":
		// The TLS cases need the host to say what to do.
	case errors.Is(err, http.ErrSchemeMismatch), errors.As(err, &tlsRecord) && string(tlsRecord.RecordHeader[:]) == "HTTP/":
		h := networds.HostOnly(host)
		words = fmt.Sprintf("%s speaks plain HTTP, not HTTPS: if you trust the network to it, pass --insecure-registry %s", h, h)
	case errors.As(err, &x509Unknown), errors.As(err, &x509Host), errors.As(err, &x509Invalid), errors.As(err, &tlsVerify):
		h := networds.HostOnly(host)
		words = fmt.Sprintf("%s's TLS certificate is not trusted (%s): add its CA to the system's trust store; a registry that speaks plain HTTP needs --insecure-registry %s", h, networds.CertReason(err), h)
	case errors.As(err, &tlsRecord):
		h := networds.HostOnly(host)
		words = fmt.Sprintf("%s does not speak TLS (%v): a registry that speaks plain HTTP needs --insecure-registry %s", h, tlsRecord, h)
	}
	if words == "" {
		return "", ""
	}
	return words, inner
}

// BlobError prefixes err with "blob DIGEST: " unless its message names
// the digest already: a failed blob's digest is said once, however many
// layers wrap the error.
func BlobError(digest fmt.Stringer, err error) error {
	if err == nil || strings.Contains(err.Error(), digest.String()) {
		return err
	}
	return fmt.Errorf("blob %s: %w", digest, err)
}

// NameOnce is msg said of name: "name: msg", or msg alone when it names
// name already.
func NameOnce(name, msg string) string {
	if strings.Contains(msg, name) {
		return msg
	}
	return name + ": " + msg
}

// IsNotFound says whether err is a registry's 404 answer (no such
// manifest, tag or blob), through any wrapping.
func IsNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}
