package hostcheck

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/kiln-build/kiln/registry"
)

// configDir is where config.json is read from: the option, $DOCKER_CONFIG
// on the live root, else ~/.docker (under Root).
func (o *GatherOptions) configDir() string {
	if o.DockerConfig != "" {
		return o.DockerConfig
	}
	if o.Root == "/" {
		return config.Dir() // $DOCKER_CONFIG or ~/.docker
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return o.path(filepath.Join(home, ".docker"))
}

// readRegistryAuth records which registries have credentials, never the
// credentials: auths keys, credHelpers keys, the credsStore's name. For
// o.Registries it asks the credential helper the config names, through
// layers' helper runner (time-limited by o.HelperTimeout, its output never
// quoted), whether credentials exist; a helper that fails or hangs is
// recorded by its error alone.
func readRegistryAuth(ctx context.Context, o *GatherOptions) Registry {
	dir := o.configDir()
	r := Registry{Registries: []string{}}
	path := filepath.Join(dir, config.ConfigFileName)
	f, err := os.Open(path)
	if err != nil {
		return r
	}
	defer f.Close()
	cf := configfile.New(path)
	if err := cf.LoadFromReader(f); err != nil {
		return r
	}
	r.ConfigFile = path
	add := func(host string) {
		host = registryHost(host)
		if !slices.Contains(r.Registries, host) {
			r.Registries = append(r.Registries, host)
		}
	}
	for k, a := range cf.AuthConfigs {
		// An entry with nothing in it (docker login to a credsStore leaves
		// one) says nothing about credentials by itself.
		if a.Auth != "" || a.Username != "" || a.Password != "" || a.IdentityToken != "" || a.RegistryToken != "" {
			add(k)
		}
	}
	asked := map[string]bool{}
	for _, reg := range o.Registries {
		asked[registryHost(reg)] = true
	}
	for k, h := range cf.CredentialHelpers {
		// A helper entry is only a place to look; for the registries the
		// check needs, the helper is asked below.
		if !asked[registryHost(k)] {
			add(k)
		}
		if !slices.Contains(r.CredHelpers, h) {
			r.CredHelpers = append(r.CredHelpers, h)
		}
	}
	r.CredsStore = cf.CredentialsStore
	// Ask the helpers about the registries the check needs; only the
	// answer "has credentials" is kept.
	for _, reg := range o.Registries {
		if slices.Contains(r.Registries, registryHost(reg)) {
			continue
		}
		nr, err := name.NewRegistry(registryHost(reg))
		if err != nil {
			continue
		}
		_, found, err := registry.HelperCredentials(ctx, cf, nr, o.HelperTimeout)
		switch {
		case err != nil:
			if r.HelperErrors == nil {
				r.HelperErrors = map[string]string{}
			}
			r.HelperErrors[registryHost(reg)] = err.Error()
		case found:
			add(reg)
		}
	}
	sort.Strings(r.Registries)
	sort.Strings(r.CredHelpers)
	return r
}

// registryHost normalises a config key or image registry to a host name:
// "https://index.docker.io/v1/" and "index.docker.io" are docker.io.
func registryHost(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	switch s {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return "docker.io"
	}
	return s
}
