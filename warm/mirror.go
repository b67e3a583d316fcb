package warm

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// Mirrors maps a registry (as name.Registry.RegistryStr spells it:
// "index.docker.io", "127.0.0.1:5000") to an endpoint host[:port] that
// serves the same repositories. Manifests and blobs are read from the
// endpoint; image records, index entries and the distribution-source label
// keep the real reference, so a host warmed through a mirror (or fleet's
// push tunnel) holds exactly what a pull of the real name would have left.
// This is containerd's hosts.toml mirror, for one run.
type Mirrors map[string]string

// ParseMirror parses REGISTRY=ENDPOINT (--mirror). ENDPOINT is host[:port];
// a scheme is refused rather than guessed (loopback endpoints are plain
// HTTP, others need --insecure-registry for HTTP).
func ParseMirror(s string) (registry, endpoint string, err error) {
	reg, ep, ok := strings.Cut(s, "=")
	reg, ep = strings.TrimSpace(reg), strings.TrimSpace(ep)
	if !ok || reg == "" || ep == "" {
		return "", "", fmt.Errorf("%q: want REGISTRY=ENDPOINT (e.g. ghcr.io=mirror.local:5000)", s)
	}
	if strings.Contains(ep, "://") || strings.Contains(ep, "/") {
		return "", "", fmt.Errorf("%q: ENDPOINT is host[:port], without scheme or path", s)
	}
	r, err := name.NewRegistry(reg, name.WeakValidation)
	if err != nil {
		return "", "", fmt.Errorf("%q: registry %q: %v", s, reg, err)
	}
	if _, err := name.NewRegistry(ep, name.WeakValidation); err != nil {
		return "", "", fmt.Errorf("%q: endpoint %q: %v", s, ep, err)
	}
	return r.RegistryStr(), ep, nil
}

// fetchRef is where ref is read from: ref itself, or the same repository
// and tag or digest on the registry's mirror endpoint.
func (m Mirrors) fetchRef(ref name.Reference, lopts []registry.Option) (name.Reference, error) {
	ep, ok := m[ref.Context().RegistryStr()]
	if !ok {
		return ref, nil
	}
	sep := ":"
	if _, ok := ref.(name.Digest); ok {
		sep = "@"
	}
	s := ep + "/" + ref.Context().RepositoryStr() + sep + ref.Identifier()
	r, err := layers.ParseRef(s, lopts...)
	if err != nil {
		return nil, fmt.Errorf("mirror of %s: %v", ref.Context().RegistryStr(), err)
	}
	return r.Name, nil
}
