package layers

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ZstdTagSuffix names an image's zstd variant: kiln build, slim and convert
// push REPO:TAG-zstd beside the gzip REPO:TAG, and kiln warm looks for it.
const ZstdTagSuffix = "-zstd"

// ZstdTag is t's zstd variant, TAG-zstd.
func ZstdTag(t name.Tag) name.Tag { return t.Context().Tag(t.TagStr() + ZstdTagSuffix) }

// Kind says where an image reference points.
type Kind string

// The sources kiln reads images from.
const (
	KindRegistry      Kind = "registry"
	KindOCILayout     Kind = "oci"
	KindDockerArchive Kind = "docker-archive"
)

// Ref is a parsed image reference.
type Ref struct {
	Kind Kind
	// Raw is what the user typed; errors name it.
	Raw string
	// Name is set for registry references.
	Name name.Reference
	// Path is the layout directory or archive file for local sources.
	Path string
	// Tag selects an image inside a layout (its ref.name annotation) or an
	// archive (its RepoTags); empty means "the only one".
	Tag string
	// Digest selects a layout's image by its index.json descriptor
	// (oci:DIR@sha256:HEX); it excludes Tag.
	Digest v1.Hash
}

func (r Ref) String() string { return r.Raw }

// ParseRef parses the reference syntax every kiln command shares:
//
//	REGISTRY/REPO[:TAG|@DIGEST]   a registry
//	oci:DIR[:TAG|@sha256:HEX]     an OCI image layout
//	docker-archive:FILE[:TAG]     a 'docker save' tarball
func ParseRef(s string, opts ...Option) (Ref, error) {
	o := makeOptions(opts)
	if s == "" {
		return Ref{}, fmt.Errorf("empty image reference")
	}
	switch {
	case strings.HasPrefix(s, "oci:"):
		rest := strings.TrimPrefix(s, "oci:")
		if i := strings.LastIndex(rest, "@sha256:"); i >= 0 {
			h, err := v1.NewHash(rest[i+1:])
			if err != nil || len(h.Hex) != 64 || rest[:i] == "" {
				return Ref{}, fmt.Errorf("image %q: oci:DIR@sha256:HEX needs a directory and 64 hex digits", s)
			}
			return Ref{Kind: KindOCILayout, Raw: s, Path: rest[:i], Digest: h}, nil
		}
		dir, tag := splitLocal(rest)
		if dir == "" {
			return Ref{}, fmt.Errorf("image %q: oci: needs a directory (oci:DIR[:TAG|@sha256:HEX])", s)
		}
		return Ref{Kind: KindOCILayout, Raw: s, Path: dir, Tag: tag}, nil
	case strings.HasPrefix(s, "docker-archive:"):
		file, tag := splitArchive(strings.TrimPrefix(s, "docker-archive:"))
		if file == "" {
			return Ref{}, fmt.Errorf("image %q: docker-archive: needs a file (docker-archive:FILE.tar)", s)
		}
		return Ref{Kind: KindDockerArchive, Raw: s, Path: file, Tag: tag}, nil
	}
	if i := strings.Index(s, ":"); i > 0 && !strings.ContainsAny(s[:i], "./") && strings.HasPrefix(s[i+1:], "/") {
		return Ref{}, fmt.Errorf("image %q: unknown transport %q (use a registry reference, oci:DIR[:TAG] or docker-archive:FILE)", s, s[:i])
	}
	nopts := []name.Option{name.StrictValidation}
	if o.insecure(registryHost(s)) {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.ParseReference(s, nopts...)
	if err != nil {
		return Ref{}, fmt.Errorf("image %q: not a valid reference: %v", s, trimNameErr(err))
	}
	return Ref{Kind: KindRegistry, Raw: s, Name: ref}, nil
}

// splitLocal splits "path[:tag]" where the tag may not contain '/'. A path
// that exists as given wins, so files with colons still work.
func splitLocal(s string) (string, string) {
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	i := strings.LastIndex(s, ":")
	if i < 0 || strings.Contains(s[i+1:], "/") {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// splitArchive is splitLocal for docker archives, whose tags are image names
// with a repository ("FILE.tar:repo/name:tag"): a path ending in .tar ends at
// the first ".tar:".
func splitArchive(s string) (string, string) {
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	if i := strings.Index(s, ".tar:"); i >= 0 {
		return s[:i+4], s[i+5:]
	}
	return splitLocal(s)
}

func trimNameErr(err error) string {
	msg := err.Error()
	return strings.TrimSuffix(msg, "; no digest or tag found")
}

// registryHost extracts the registry host of an unparsed reference the way
// the Docker CLI does: the first component, if it looks like a host.
func registryHost(s string) string {
	first, _, ok := strings.Cut(s, "/")
	if !ok {
		return name.DefaultRegistry
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return first
	}
	return name.DefaultRegistry
}

// Option configures how images are located and fetched.
type Option func(*options)

type options struct {
	platform      v1.Platform
	insecureHosts []string
	keychain      authn.Keychain
	transport     http.RoundTripper
	userAgent     string
	idle          time.Duration
	rate          minRate
	helperTimeout time.Duration
	fetch         []FetchOption
}

// DefaultPlatform is linux/amd64: most rented GPUs are x86 hosts. GH200-class
// hosts need linux/arm64, asked for with WithPlatform.
var DefaultPlatform = v1.Platform{OS: "linux", Architecture: "amd64"}

func makeOptions(opts []Option) *options {
	o := &options{
		platform:      DefaultPlatform,
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

// WithPlatform selects the image of an index for platform p.
func WithPlatform(p v1.Platform) Option { return func(o *options) { o.platform = p } }

// WithInsecureRegistries allows plain HTTP to the named hosts (host or
// host:port). Loopback registries are always allowed plain HTTP.
func WithInsecureRegistries(hosts ...string) Option {
	return func(o *options) { o.insecureHosts = append(o.insecureHosts, hosts...) }
}

// WithKeychain replaces the Docker-config keychain (tests, CI secrets).
func WithKeychain(k authn.Keychain) Option { return func(o *options) { o.keychain = k } }

// WithTransport replaces the HTTP transport.
func WithTransport(t http.RoundTripper) Option { return func(o *options) { o.transport = t } }

func (o *options) insecure(host string) bool {
	for _, h := range o.insecureHosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return isLoopback(host)
}

func isLoopback(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// ParsePlatform parses "os/arch[/variant]".
func ParsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want OS/ARCH[/VARIANT], e.g. linux/amd64 or linux/arm64", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// PlatformString formats p as os/arch[/variant].
func PlatformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}
