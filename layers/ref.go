package layers

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
)

// ZstdTagSuffix names an image's zstd variant: kiln build, slim and convert
// push REPO:TAG-zstd beside the gzip REPO:TAG, and kiln warm looks for it.
const ZstdTagSuffix = "-zstd"

// ZstdTag is t's zstd variant, TAG-zstd.
func ZstdTag(t name.Tag) name.Tag { return t.Context().Tag(t.TagStr() + ZstdTagSuffix) }

// ErofsTagSuffix names an image's native EROFS variant (layers/erofs):
// kiln convert, slim and build --format erofs push REPO:TAG-erofs beside
// the gzip and zstd tags, for containerd's EROFS snapshotter.
const ErofsTagSuffix = "-erofs"

// ErofsTag is t's EROFS variant, TAG-erofs.
func ErofsTag(t name.Tag) name.Tag { return t.Context().Tag(t.TagStr() + ErofsTagSuffix) }

// Kind says where an image reference points.
type Kind string

// The sources kiln reads images from.
const (
	KindRegistry      Kind = "registry"
	KindOCILayout     Kind = "oci"
	KindDockerArchive Kind = "docker-archive"
	// KindDaemon is an image in the local Docker daemon (docker-daemon:NAME),
	// read through the daemon's image-save API; Ref.Tag holds its full name.
	KindDaemon Kind = "docker-daemon"
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
//	[REGISTRY/]REPO[:TAG|@DIGEST]  a registry; Docker Hub short names as
//	                               docker, crane and skopeo read them
//	                               (ubuntu = docker.io/library/ubuntu:latest)
//	docker://REF                   the same, as skopeo writes it
//	oci:DIR[:TAG|@sha256:HEX]      an OCI image layout
//	docker-archive:FILE[:TAG]      a 'docker save' tarball
//	docker-daemon:NAME[:TAG]       an image in the local Docker daemon
//
// A refused reference's error says why and what to write.
func ParseRef(s string, opts ...Option) (Ref, error) {
	o := makeOptions(opts)
	if s == "" {
		return Ref{}, fmt.Errorf("empty image reference (write [REGISTRY/]REPO[:TAG], e.g. ubuntu:24.04, or oci:DIR, docker-archive:FILE, docker-daemon:NAME)")
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
		dir, tag := splitLayout(rest)
		if dir == "" {
			return Ref{}, fmt.Errorf("image %q: oci: needs a directory (oci:DIR[:TAG|@sha256:HEX])", s)
		}
		return Ref{Kind: KindOCILayout, Raw: s, Path: dir, Tag: tag}, nil
	case strings.HasPrefix(s, "docker-archive:"):
		file, tag := splitArchive(strings.TrimPrefix(s, "docker-archive:"))
		if file == "" {
			return Ref{}, fmt.Errorf("image %q: docker-archive: needs a file (docker-archive:FILE.tar[:NAME:TAG])", s)
		}
		return Ref{Kind: KindDockerArchive, Raw: s, Path: file, Tag: tag}, nil
	case strings.HasPrefix(s, "docker-daemon:"):
		rest := strings.TrimPrefix(s, "docker-daemon:")
		if rest == "" {
			return Ref{}, fmt.Errorf("image %q: docker-daemon: needs an image name (docker-daemon:NAME[:TAG], as docker images lists it)", s)
		}
		n, err := NormalizeName(rest)
		if err != nil {
			return Ref{}, fmt.Errorf("image %q: %v", s, err)
		}
		return Ref{Kind: KindDaemon, Raw: s, Tag: n}, nil
	case strings.HasPrefix(s, "docker://"):
		if strings.TrimPrefix(s, "docker://") == "" {
			return Ref{}, fmt.Errorf("image %q: docker:// needs an image name (docker://[REGISTRY/]REPO[:TAG])", s)
		}
		r, err := parseRegistry(strings.TrimPrefix(s, "docker://"), o)
		if err != nil {
			return Ref{}, fmt.Errorf("image %q: %v", s, err)
		}
		r.Raw = s
		return r, nil
	}
	if i := strings.Index(s, ":"); i > 0 && !strings.ContainsAny(s[:i], "./") && strings.HasPrefix(s[i+1:], "/") {
		return Ref{}, fmt.Errorf("image %q: unknown transport %q (write a registry reference such as ubuntu:24.04, docker://REF, oci:DIR[:TAG], docker-archive:FILE or docker-daemon:NAME)", s, s[:i])
	}
	r, err := parseRegistry(s, o)
	if err != nil {
		return Ref{}, fmt.Errorf("image %q: %v", s, err)
	}
	r.Raw = s
	return r, nil
}

// parseRegistry reads a registry reference by the one rule (NormalizeName)
// and hands go-containerregistry the full name, so every request, log line
// and record names docker.io/library/ubuntu:latest, never "ubuntu".
func parseRegistry(s string, o *options) (Ref, error) {
	full, err := NormalizeName(s)
	if err != nil {
		return Ref{}, err
	}
	var nopts []name.Option
	if o.insecure(registryHost(full)) {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.ParseReference(full, nopts...)
	if err != nil {
		return Ref{}, fmt.Errorf("not a valid reference: %v (write [REGISTRY/]REPO[:TAG|@sha256:DIGEST], e.g. ubuntu:24.04 or ghcr.io/org/app:v1)", trimNameErr(err))
	}
	return Ref{Kind: KindRegistry, Name: ref}, nil
}

// Canonical is the reference written out in full, the name locks, plans
// and reports record: docker.io/library/ubuntu:24.04 for "ubuntu:24.04";
// local sources as typed.
func (r Ref) Canonical() string {
	if r.Kind == KindRegistry && r.Name != nil {
		return r.Name.String()
	}
	return r.Raw
}

// NormalizeName is kiln's one rule for image names, Docker's own
// (github.com/distribution/reference): a Docker Hub short name gains its
// registry and, for official images, library/ ("nvidia/cuda:12.4.1-base" is
// docker.io/nvidia/cuda:12.4.1-base, "ubuntu" docker.io/library/ubuntu),
// and a name without tag or digest gets :latest. The error says what is
// wrong with s and what to write instead.
func NormalizeName(s string) (string, error) {
	if strings.TrimSpace(s) != s || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' }) {
		return "", fmt.Errorf("an image name has no spaces or control characters (write [REGISTRY/]REPO[:TAG], e.g. ubuntu:24.04)")
	}
	if before, dg, ok := strings.Cut(s, "@"); ok {
		if err := digest.Digest(dg).Validate(); err != nil {
			return "", fmt.Errorf("digest %q is not sha256: and 64 hex digits (write %s@sha256:<64 hex digits> as docker images --digests prints it, or a tag)", dg, before)
		}
	}
	n, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return "", nameError(s, err)
	}
	return reference.TagNameOnly(n).String(), nil
}

// validTag is the OCI distribution spec's tag.
var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// nameError turns distribution/reference's error into why and what to write.
func nameError(s string, err error) error {
	const want = "write [REGISTRY/]REPO[:TAG|@sha256:DIGEST], e.g. ubuntu:24.04 or ghcr.io/org/app:v1"
	repo, tag := s, ""
	if i := strings.LastIndex(s, ":"); i > strings.LastIndex(s, "/") {
		repo, tag = s[:i], s[i+1:]
	}
	switch {
	case errors.Is(err, reference.ErrNameContainsUppercase) || strings.Contains(err.Error(), "must be lowercase"):
		fix := repo
		if host, path, ok := strings.Cut(repo, "/"); ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
			fix = host + "/" + strings.ToLower(path)
		} else {
			fix = strings.ToLower(repo)
		}
		if tag != "" {
			fix += ":" + tag
		}
		return fmt.Errorf("repository names are lower case (write %s)", fix)
	case errors.Is(err, reference.ErrTagInvalidFormat) || tag != "" && !strings.Contains(tag, "/") && !validTag.MatchString(tag):
		return fmt.Errorf("tag %q is not valid: a tag is up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'", tag)
	case errors.Is(err, reference.ErrNameTooLong):
		return fmt.Errorf("the name is longer than %d characters", reference.RepositoryNameTotalLengthMax)
	case errors.Is(err, reference.ErrNameEmpty):
		return fmt.Errorf("the image name is empty (%s)", want)
	}
	return fmt.Errorf("not a valid reference: %v (%s)", err, want)
}

// splitLayout splits an oci: reference's "DIR[:TAG]". kiln's own layouts
// name images in full (DIR:127.0.0.1:5000/app:v1, DIR:docker.io/library/
// ubuntu:24.04): the first colon before which a layout (a directory with
// an index.json) ends splits them; for a layout not yet written, a full
// name (one with a registry host) after a colon is the tag; else
// splitLocal.
func splitLayout(s string) (string, string) {
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		if fi, err := os.Stat(filepath.Join(s[:i], "index.json")); err == nil && fi.Mode().IsRegular() {
			return s[:i], s[i+1:]
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		if rest := s[i+1:]; registryHost(rest) != name.DefaultRegistry || strings.HasPrefix(rest, "docker.io/") {
			if _, err := reference.ParseNormalizedNamed(rest); err == nil {
				return s[:i], rest
			}
		}
	}
	return splitLocal(s)
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
	exactPlatform bool
	insecureHosts []string
	keychain      authn.Keychain
	transport     http.RoundTripper
	userAgent     string
	idle          time.Duration
	rate          minRate
	helperTimeout time.Duration
	fetch         []FetchOption
	archiveName   string
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

// WithExactPlatform selects platform p, as WithPlatform does, and also
// refuses a single-platform image of another platform: a user who asked
// for linux/arm64 must not be shown an amd64-only image's contents as if
// they were arm64's (what --platform, when given, means).
func WithExactPlatform(p v1.Platform) Option {
	return func(o *options) { o.platform, o.exactPlatform = p, true }
}

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
