package registry

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/kiln-build/kiln/internal/redact"
)

// Mirror is one registry mirror: an endpoint that serves a registry's
// repositories, read before the registry itself (docker's
// registry-mirrors, containerd's hosts.toml). Writes never go to a
// mirror.
type Mirror struct {
	// Registry is the registry mirrored, as name.Registry.RegistryStr
	// spells it: "index.docker.io" for Docker Hub, "ghcr.io".
	Registry string
	// Endpoint is host[:port], optionally with a path that goes before
	// every repository (a Harbor or Artifactory proxy project:
	// harbor.corp/dockerhub-proxy reads ubuntu as
	// harbor.corp/dockerhub-proxy/library/ubuntu).
	Endpoint string
	// HTTP says the endpoint speaks plain HTTP (written http://);
	// loopback endpoints always may.
	HTTP bool
	// Source says where the setting came from: "--mirror",
	// "$KILN_MIRROR", a daemon.json or hosts.toml file.
	Source string
}

// MirrorEnv is the environment variable that lists registry mirrors,
// comma-separated, in --mirror's syntax.
const MirrorEnv = "KILN_MIRROR"

// mirrorSyntax is what a mirror setting's error asks for.
const mirrorSyntax = "write REGISTRY=ENDPOINT (ghcr.io=mirror.corp:5000) or ENDPOINT alone for Docker Hub (mirror.corp:5000, harbor.corp/dockerhub-proxy)"

// String is the endpoint as written: http:// before a plain-HTTP one.
func (m Mirror) String() string {
	if m.HTTP {
		return "http://" + m.Endpoint
	}
	return m.Endpoint
}

// host is the endpoint's host[:port].
func (m Mirror) host() string {
	h, _, _ := strings.Cut(m.Endpoint, "/")
	return h
}

// repo is repo's repository on the mirror: the same path under the
// endpoint (and its path prefix).
func (m Mirror) repo(repo name.Repository) string {
	return m.Endpoint + "/" + repo.RepositoryStr()
}

// ParseMirror reads one mirror setting, the syntax every source shares
// (--mirror, $KILN_MIRROR): REGISTRY=ENDPOINT mirrors REGISTRY (as
// containerd's hosts.toml mirrors any registry); ENDPOINT alone mirrors
// Docker Hub (as docker's registry-mirrors). ENDPOINT is
// host[:port][/path], with http:// for a plain-HTTP endpoint (https://
// is the default and may be written).
func ParseMirror(s string) (Mirror, error) {
	s = strings.TrimSpace(s)
	reg, ep, ok := strings.Cut(s, "=")
	if !ok {
		reg, ep = name.DefaultRegistry, s
	}
	reg, ep = strings.TrimSpace(reg), strings.TrimSpace(ep)
	if reg == "" || ep == "" {
		return Mirror{}, fmt.Errorf("mirror %q: %s", s, mirrorSyntax)
	}
	r, err := name.NewRegistry(reg, name.WeakValidation)
	if err != nil || strings.Contains(reg, "/") {
		return Mirror{}, fmt.Errorf("mirror %q: registry %q is not a registry host (%s)", s, reg, mirrorSyntax)
	}
	m, err := parseEndpoint(ep)
	if err != nil {
		return Mirror{}, fmt.Errorf("mirror %q: %v", cleanSetting(s), err)
	}
	m.Registry = r.RegistryStr()
	return m, nil
}

// parseEndpoint reads ENDPOINT: [http://|https://]host[:port][/path].
func parseEndpoint(ep string) (Mirror, error) {
	var m Mirror
	switch {
	case strings.HasPrefix(ep, "http://"):
		m.HTTP, ep = true, strings.TrimPrefix(ep, "http://")
	case strings.HasPrefix(ep, "https://"):
		ep = strings.TrimPrefix(ep, "https://")
	case strings.Contains(ep, "://"):
		return m, fmt.Errorf("endpoint %q: only http:// and https:// are registry schemes", ep)
	}
	if strings.ContainsAny(ep, "@?#") {
		return m, fmt.Errorf("endpoint %q: write host[:port][/path] without credentials or query (credentials come from docker login)", redactEndpoint(ep))
	}
	ep = strings.TrimSuffix(ep, "/")
	host, path, _ := strings.Cut(ep, "/")
	if path == "v2" || strings.HasPrefix(path, "v2/") {
		return m, fmt.Errorf("endpoint %q: leave out /v2 (kiln adds it)", ep)
	}
	if _, err := name.NewRegistry(host, name.WeakValidation); err != nil || host == "" || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return m, fmt.Errorf("endpoint %q: %q is not a registry host (a name with a dot or a port: mirror.corp, mirror:5000)", ep, host)
	}
	if path != "" {
		if _, err := name.NewRepository(host+"/"+path+"/x", name.WeakValidation); err != nil {
			return m, fmt.Errorf("endpoint %q: path %q is not a repository prefix (lower case, digits, '.', '_', '-', '/')", ep, path)
		}
	}
	m.Endpoint = ep
	return m, nil
}

// cleanSetting is a mirror setting as an error may quote it: without
// what comes before an '@' in its endpoint (user:password).
func cleanSetting(s string) string {
	reg, ep, ok := strings.Cut(s, "=")
	if !ok {
		reg, ep = "", s
	}
	if i := strings.LastIndex(ep, "@"); i >= 0 {
		scheme := ""
		if j := strings.Index(ep, "://"); j >= 0 && j < i {
			scheme = ep[:j+3]
		}
		ep = scheme + "…@" + ep[i+1:]
	}
	if ok {
		return reg + "=" + ep
	}
	return ep
}

// redactEndpoint drops user:password@ from what an error quotes.
func redactEndpoint(ep string) string {
	if u, err := url.Parse("https://" + ep); err == nil && u.User != nil {
		u.User = nil
		return strings.TrimPrefix(u.String(), "https://")
	}
	return redact.String(ep)
}

// ParseMirrors reads a comma-separated list of mirror settings
// ($KILN_MIRROR); source is recorded in each.
func ParseMirrors(list, source string) ([]Mirror, error) {
	var out []Mirror
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		m, err := ParseMirror(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", source, err)
		}
		m.Source = source
		out = append(out, m)
	}
	return out, nil
}

// WithMirrors adds registry mirrors: a registry reference is read from
// its registry's mirrors first, in order, and from the registry after
// (Client). Writes (WithPush) never go to a mirror.
func WithMirrors(ms ...Mirror) Option {
	return func(o *Options) { o.mirrors = append(o.mirrors, ms...) }
}

// WithMirrorNote sets where a run says which source it read an image
// from (a mirror, or the registry after its mirrors failed): one line per
// reference, e.g. printed on stderr.
func WithMirrorNote(f func(line string)) Option { return func(o *Options) { o.mirrorNote = f } }

// Mirrors are the mirrors the options name for registry reg
// (RegistryStr), in the order they are tried.
func (o *Options) Mirrors(reg string) []Mirror {
	var out []Mirror
	for _, m := range o.mirrors {
		if m.Registry == reg {
			out = append(out, m)
		}
	}
	return out
}
