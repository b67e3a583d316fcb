package layers

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/registry"
)

// The registry client (auth, transport, retries, redaction, verified
// reads) is the package registry, below layers and layers/blob. These
// names stay here so that callers move to it gradually; new code uses
// registry's.

// Option configures how images are located, fetched and written.
type Option = registry.Option

// Registry client types.
type (
	Fetcher      = registry.Client
	FetchOption  = registry.FetchOption
	StatusError  = registry.StatusError
	VerifyReader = registry.VerifyReader
)

// Registry client errors and defaults.
var (
	ErrDigestMismatch = registry.ErrDigestMismatch
	ErrSizeMismatch   = registry.ErrSizeMismatch
	ErrIdleTimeout    = registry.ErrIdleTimeout
	ErrTooSlow        = registry.ErrTooSlow
	DefaultPlatform   = registry.DefaultPlatform
	DefaultMinRate    = registry.DefaultMinRate
)

// Registry client defaults.
const (
	DefaultIdleTimeout   = registry.DefaultIdleTimeout
	DefaultHelperTimeout = registry.DefaultHelperTimeout
)

// Registry client functions.
var (
	NewFetcher             = registry.NewClient
	WithRetries            = registry.WithRetries
	WithMaxWait            = registry.WithMaxWait
	WithFetchOptions       = registry.WithFetchOptions
	WithIdleTimeout        = registry.WithIdleTimeout
	WithMinRate            = registry.WithMinRate
	WithHelperTimeout      = registry.WithHelperTimeout
	WithInsecureRegistries = registry.WithInsecureRegistries
	WithKeychain           = registry.WithKeychain
	WithTransport          = registry.WithTransport
	RegistryTransport      = registry.RegistryTransport
	RemoteOptions          = registry.RemoteOptions
	HTTPClient             = registry.HTTPClient
	HelperCredentials      = registry.HelperCredentials
	NewVerifyReader        = registry.NewVerifyReader
	IsIntegrityError       = registry.IsIntegrityError
	NormalizeName          = registry.NormalizeName
	Redact                 = registry.Redact
	RedactError            = registry.RedactError
	StandsAlone            = registry.StandsAlone
	BlobError              = registry.BlobError
	NameOnce               = registry.NameOnce
	Sleep                  = registry.Sleep
)

// WithPlatform selects the image of an index for platform p.
func WithPlatform(p v1.Platform) Option { return func(o *registry.Options) { o.Platform = p } }

// WithExactPlatform selects platform p, as WithPlatform does, and also
// refuses a single-platform image of another platform: a user who asked
// for linux/arm64 must not be shown an amd64-only image's contents as if
// they were arm64's (what --platform, when given, means).
func WithExactPlatform(p v1.Platform) Option {
	return func(o *registry.Options) { o.Platform, o.ExactPlatform = p, true }
}
