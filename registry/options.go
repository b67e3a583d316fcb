package registry

import (
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Option configures how registries are reached (and, for layers, which
// shares these options, how an image is selected and written).
type Option func(*Options)

// Options are what a list of Option sets. The registry client's own
// settings are unexported; Platform, ExactPlatform and ArchiveName are
// read by layers (index selection, docker-archive writes) and set through
// its WithPlatform, WithExactPlatform and WithArchiveName.
type Options struct {
	// Platform selects an index's image (default DefaultPlatform).
	Platform v1.Platform
	// ExactPlatform also refuses a single-platform image of another
	// platform (--platform given).
	ExactPlatform bool
	// ArchiveName names the image a docker archive records.
	ArchiveName string

	insecureHosts []string
	keychain      authn.Keychain
	transport     http.RoundTripper
	userAgent     string
	idle          time.Duration
	rate          minRate
	helperTimeout time.Duration
	fetch         []FetchOption
	pool          *Pool
	push          bool
	mirrors       []Mirror
	mirrorNote    func(string)
}

// DefaultPlatform is linux/amd64: most rented GPUs are x86 hosts. GH200-class
// hosts need linux/arm64, asked for with WithPlatform.
var DefaultPlatform = v1.Platform{OS: "linux", Architecture: "amd64"}

// MakeOptions applies opts over the defaults: the Docker-config keychain
// (guarded: helpers time-limited, their output never quoted, secrets
// redacted), http.DefaultTransport, DefaultIdleTimeout, DefaultPlatform.
func MakeOptions(opts []Option) *Options {
	o := &Options{
		Platform:      DefaultPlatform,
		keychain:      authn.DefaultKeychain, // Docker config plus credential helpers
		transport:     http.DefaultTransport,
		userAgent:     "kiln",
		idle:          DefaultIdleTimeout,
		helperTimeout: DefaultHelperTimeout,
	}
	for _, opt := range opts {
		opt(o)
	}
	o.keychain = guardKeychain(o.keychain, o.helperTimeout)
	return o
}

// WithInsecureRegistries allows plain HTTP to the named hosts (host or
// host:port). Loopback registries are always allowed plain HTTP.
func WithInsecureRegistries(hosts ...string) Option {
	return func(o *Options) { o.insecureHosts = append(o.insecureHosts, hosts...) }
}

// WithKeychain replaces the Docker-config keychain (tests, CI secrets).
func WithKeychain(k authn.Keychain) Option { return func(o *Options) { o.keychain = k } }

// WithPush makes the Clients these options hand out able to push: their
// one token exchange asks for push as well as pull (a token server grants
// what the credential allows of it). A pool's Client of the repository
// that was made to read only is replaced by one that may push.
func WithPush() Option { return func(o *Options) { o.push = true } }

// WithTransport replaces the HTTP transport.
func WithTransport(t http.RoundTripper) Option { return func(o *Options) { o.transport = t } }

// Insecure says whether host (host or host:port) may be spoken to in
// plain HTTP: a loopback host, or one WithInsecureRegistries names.
func (o *Options) Insecure(host string) bool {
	for _, h := range o.insecureHosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return IsLoopback(host)
}

// IsLoopback says whether host (host, host:port, [v6]:port) is this
// machine: localhost or a loopback address. The one rule kiln has for it:
// such a registry may speak plain HTTP, a push to it is BuildKit's
// registry.insecure, a mirror there is a host's own.
func IsLoopback(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Remote is these options as go-containerregistry remote options (auth,
// transport, user agent), for requests kiln leaves to remote.
func (o *Options) Remote(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(o.keychain),
		remote.WithTransport(o.roundTripper()),
		remote.WithUserAgent(o.userAgent),
	}
}

// RemoteOptions exposes the registry options (auth, transport, insecure
// handling) for packages that push or pull blobs themselves.
func RemoteOptions(ctx context.Context, opts ...Option) []remote.Option {
	return MakeOptions(opts).Remote(ctx)
}
