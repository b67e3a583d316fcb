package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/pelletier/go-toml/v2"
)

// MirrorFiles are the host's own mirror settings kiln reads when neither
// --mirror nor $KILN_MIRROR names a registry's mirrors: Docker's
// daemon.json registry-mirrors (Docker Hub's) and containerd's hosts.toml
// directories (any registry's).
type MirrorFiles struct {
	// DockerDaemon is Docker's daemon.json ("" reads none).
	DockerDaemon string
	// HostsDirs hold containerd's <dir>/<registry>/hosts.toml.
	HostsDirs []string
}

// DefaultMirrorFiles are where Docker and containerd keep them.
var DefaultMirrorFiles = MirrorFiles{
	DockerDaemon: "/etc/docker/daemon.json",
	HostsDirs:    []string{"/etc/containerd/certs.d"},
}

// LoadMirrors gathers the mirror settings from every source, the first
// that names a registry deciding its mirrors: flags (--mirror), then env
// ($KILN_MIRROR's value), then files. One flag that is empty turns every
// source off. A source that cannot be read or parsed is an error that
// names it; a hosts.toml host kiln cannot use is passed over.
func LoadMirrors(flags []string, env string, files MirrorFiles) ([]Mirror, error) {
	if slices.Contains(flags, "") {
		return nil, nil
	}
	var layers [][]Mirror
	var fl []Mirror
	for _, f := range flags {
		ms, err := ParseMirrors(f, "--mirror")
		if err != nil {
			return nil, err
		}
		fl = append(fl, ms...)
	}
	layers = append(layers, fl)
	em, err := ParseMirrors(env, "$"+MirrorEnv)
	if err != nil {
		return nil, err
	}
	layers = append(layers, em)
	if files.DockerDaemon != "" {
		dm, err := DockerDaemonMirrors(files.DockerDaemon)
		if err != nil {
			return nil, err
		}
		layers = append(layers, dm)
	}
	var hm []Mirror
	for _, hf := range ReadHostsDirs(files.HostsDirs...) {
		hm = append(hm, hf.Mirrors()...)
	}
	layers = append(layers, hm)
	var out []Mirror
	decided := map[string]bool{}
	for _, l := range layers {
		named := map[string]bool{}
		for _, m := range l {
			if displayHost(m.Endpoint) == displayHost(m.Registry) {
				continue // the registry itself, as hosts.toml may list it
			}
			if decided[m.Registry] || slices.ContainsFunc(out, func(o Mirror) bool { return o.Registry == m.Registry && o.Endpoint == m.Endpoint }) {
				continue
			}
			named[m.Registry] = true
			out = append(out, m)
		}
		for r := range named {
			decided[r] = true
		}
	}
	return out, nil
}

// DockerDaemonMirrors reads the registry-mirrors of Docker's daemon.json
// at path (Docker Hub's mirrors, in order); a missing file has none.
func DockerDaemonMirrors(path string) ([]Mirror, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var raw struct {
		Mirrors []string `json:"registry-mirrors"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var out []Mirror
	for _, u := range raw.Mirrors {
		m, err := parseEndpoint(strings.TrimSpace(u))
		if err != nil {
			return nil, fmt.Errorf("%s: registry-mirrors: %v", path, err)
		}
		m.Registry, m.Source = name.DefaultRegistry, path
		out = append(out, m)
	}
	return out, nil
}

// HostsFile is one containerd <dir>/<registry>/hosts.toml: its hosts in
// the file's order (the order containerd tries them). Header values are
// never kept: they may carry credentials.
type HostsFile struct {
	// Registry is the directory's name (docker.io, ghcr.io,
	// 127.0.0.1:5000, _default).
	Registry string
	File     string
	Hosts    []HostsEntry
	// Err says why the file could not be read.
	Err error
}

// HostsEntry is one [host."URL"] table.
type HostsEntry struct {
	URL          string
	Capabilities []string // containerd's default: pull, resolve, push
	HeaderKeys   []string
	OverridePath bool
}

// ReadHostsDirs reads every <dir>/<registry>/hosts.toml under dirs.
func ReadHostsDirs(dirs ...string) []HostsFile {
	var out []HostsFile
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*", "hosts.toml"))
		sort.Strings(files)
		for _, f := range files {
			out = append(out, readHostsFile(f))
		}
	}
	return out
}

func readHostsFile(f string) HostsFile {
	hf := HostsFile{Registry: filepath.Base(filepath.Dir(f)), File: f}
	b, err := os.ReadFile(f)
	if err != nil {
		hf.Err = err
		return hf
	}
	var doc struct {
		Host map[string]struct {
			Capabilities []string       `toml:"capabilities"`
			Header       map[string]any `toml:"header"`
			OverridePath bool           `toml:"override_path"`
		} `toml:"host"`
	}
	if err := toml.Unmarshal(b, &doc); err != nil {
		hf.Err = fmt.Errorf("%s: %v", f, err)
		return hf
	}
	// The file's order: where each [host."URL"] first appears.
	text := string(b)
	urls := make([]string, 0, len(doc.Host))
	for u := range doc.Host {
		urls = append(urls, u)
	}
	sort.SliceStable(urls, func(i, j int) bool {
		return strings.Index(text, `"`+urls[i]+`"`) < strings.Index(text, `"`+urls[j]+`"`)
	})
	for _, u := range urls {
		h := doc.Host[u]
		e := HostsEntry{URL: u, Capabilities: h.Capabilities, OverridePath: h.OverridePath}
		if e.Capabilities == nil {
			e.Capabilities = []string{"pull", "resolve", "push"}
		}
		for k := range h.Header {
			e.HeaderKeys = append(e.HeaderKeys, k)
		}
		sort.Strings(e.HeaderKeys)
		hf.Hosts = append(hf.Hosts, e)
	}
	return hf
}

// Mirrors are the file's hosts kiln reads through: those that may pull,
// at a URL kiln can address (https or http, no path, or /v2/PREFIX with
// override_path). The _default directory and unreadable files give none.
func (h HostsFile) Mirrors() []Mirror {
	if h.Err != nil || h.Registry == "_default" {
		return nil
	}
	reg, err := name.NewRegistry(h.Registry, name.WeakValidation)
	if err != nil {
		return nil
	}
	var out []Mirror
	for _, e := range h.Hosts {
		if !slices.Contains(e.Capabilities, "pull") {
			continue
		}
		u, err := url.Parse(e.URL)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			continue
		}
		p := strings.Trim(u.Path, "/")
		switch {
		case p == "" || p == "v2":
			p = ""
		case e.OverridePath && strings.HasPrefix(p, "v2/"):
			p = strings.TrimPrefix(p, "v2/")
		default:
			continue // containerd puts /v2 after this path: not a repository prefix
		}
		ep := u.Host
		if p != "" {
			ep += "/" + p
		}
		m, err := parseEndpoint(ep)
		if err != nil {
			continue
		}
		m.HTTP, m.Registry, m.Source = u.Scheme == "http", reg.RegistryStr(), h.File
		out = append(out, m)
	}
	return out
}
