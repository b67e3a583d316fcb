package hostcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/kiln-build/kiln/registry"
)

// ContainerdConfig is what containerd's config says about pulls: the
// settings that decide pull speed and whether warmed content stays in the
// content store. Only these fields are kept — never a registry header,
// credential or the rest of the file.
type ContainerdConfig struct {
	// ConfigFile is the config read (--containerd-config, default
	// /etc/containerd/config.toml); Source says how: "containerd config
	// dump" (the daemon binary merged imports and defaults), "file"
	// (kiln read it and its imports) or "defaults" (no file).
	ConfigFile string   `json:"config_file"`
	Source     string   `json:"source"`
	Imports    []string `json:"imports,omitempty"`
	// Version is the config's schema version (2: containerd 1.x tables,
	// 3 and later: containerd 2.x tables).
	Version int `json:"version"`
	// Major is the containerd major version the settings were read for
	// (the reachable daemon's, else what the config version implies).
	Major int `json:"major"`
	// ImagesTable names the TOML table holding the CRI image settings.
	ImagesTable           string `json:"images_table"`
	Snapshotter           string `json:"snapshotter"`
	DiscardUnpackedLayers bool   `json:"discard_unpacked_layers"`
	// MaxConcurrentDownloads is the limit CRI pulls run under and
	// MaxConcurrentDownloadsKey the table.key that sets it: containerd 2.x
	// pulls through the transfer service unless the CRI falls back to
	// local pulls (LocalPull, LocalPullReason).
	MaxConcurrentDownloads    int    `json:"max_concurrent_downloads"`
	MaxConcurrentDownloadsKey string `json:"max_concurrent_downloads_key"`
	// MaxConcurrentUnpacks is the transfer service's unpack limit
	// (containerd ≥ 2.2; 0 when the config has no such key).
	MaxConcurrentUnpacks int `json:"max_concurrent_unpacks,omitempty"`
	// ConcurrentLayerFetchBuffer is containerd ≥ 2.1's chunk size in bytes
	// for fetching one layer over several connections (0: off, each layer
	// over one connection), read from the table the CRI pull goes through
	// (ConcurrentLayerFetchBufferKey); containerd 2.x only.
	ConcurrentLayerFetchBuffer    int    `json:"concurrent_layer_fetch_buffer"`
	ConcurrentLayerFetchBufferKey string `json:"concurrent_layer_fetch_buffer_key,omitempty"`
	ImagePullWithSyncFs           bool   `json:"image_pull_with_sync_fs,omitempty"`
	UseLocalImagePull             bool   `json:"use_local_image_pull,omitempty"`
	LocalPull                     bool   `json:"local_pull"`
	LocalPullReason               string `json:"local_pull_reason,omitempty"`
	// RegistryConfigPath is the CRI registry config_path (hosts.toml
	// directories, ':'-separated); Mirrors the mirrors found there and in
	// the deprecated registry.mirrors table.
	RegistryConfigPath string   `json:"registry_config_path,omitempty"`
	Mirrors            []Mirror `json:"mirrors"`
	// CRIDisabled is true when disabled_plugins names the CRI plugin: no
	// Kubernetes pull goes through these settings (and config dump shows
	// its defaults, not the file's values).
	CRIDisabled bool `json:"cri_disabled,omitempty"`
	// Ignored are settings the file makes that containerd 2.x drops when
	// it migrates a version 2 config: snapshotter and
	// discard_unpacked_layers of a [plugins."io.containerd.grpc.v1.cri".containerd]
	// table without a runtimes table.
	Ignored []string `json:"ignored,omitempty"`
	// Problems are keys of the wrong type ("FILE: TABLE.KEY: want an
	// integer, got a string"), read as containerd's default.
	Problems []string `json:"problems,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// Mirror is one registry mirror a runtime is configured with.
type Mirror struct {
	// Registry is what it mirrors: the hosts.toml directory name
	// (docker.io, _default for every registry) or registry.mirrors key.
	Registry     string   `json:"registry"`
	File         string   `json:"file"` // the hosts.toml, config.toml or daemon.json naming it
	URL          string   `json:"url"`  // user info removed
	Capabilities []string `json:"capabilities,omitempty"`
	// Kind is "spegel" or "dragonfly" when recognized, Why how.
	Kind string `json:"kind,omitempty"`
	Why  string `json:"why,omitempty"`
}

// DockerDaemonConfig is what daemon.json says about pulls.
type DockerDaemonConfig struct {
	ConfigFile string `json:"config_file"`
	Exists     bool   `json:"exists"`
	// MaxConcurrentDownloads and MaxConcurrentUploads are the effective
	// values (dockerd's default 3 and 5 when unset).
	MaxConcurrentDownloads int      `json:"max_concurrent_downloads"`
	MaxConcurrentUploads   int      `json:"max_concurrent_uploads"`
	StorageDriver          string   `json:"storage_driver,omitempty"`
	ContainerdSnapshotter  bool     `json:"containerd_snapshotter"`
	RegistryMirrors        []Mirror `json:"registry_mirrors"`
	Error                  string   `json:"error,omitempty"`
}

// Table names in containerd's config.
const (
	criV2      = "io.containerd.grpc.v1.cri"
	criImages  = "io.containerd.cri.v1.images"
	transferV3 = "io.containerd.transfer.v1.local"
	// containerd's and dockerd's defaults.
	defaultDownloads       = 3
	defaultDockerUploads   = 5
	defaultTransferUnpacks = 1
)

// spegelPorts are the ports Spegel's Helm chart writes into hosts.toml
// (its registry's hostPort 30020 and nodePort 30021); dragonflyPorts
// dfdaemon's documented proxy port. Other Dragonfly setups (dfinit's) are
// recognized by the X-Dragonfly-Registry header they send instead.
var (
	spegelPorts    = map[string]bool{"30020": true, "30021": true}
	dragonflyPorts = map[string]bool{"65001": true}
)

// containerdConfigPath is the file to read: explicit, else the standard
// place under Root.
func (o *GatherOptions) containerdConfigPath() string {
	if o.ContainerdConfig != "" {
		return o.ContainerdConfig
	}
	return o.path("etc/containerd/config.toml")
}

// readContainerdConfig reads containerd's effective pull settings for a
// daemon of major version major (0: unknown). It prefers `containerd
// config dump` — the daemon's own merge of imports and defaults, and its
// migration of old config versions — when a containerd binary is known,
// and reads the file and its imports itself otherwise.
func readContainerdConfig(ctx context.Context, o *GatherOptions, major int) *ContainerdConfig {
	path := o.containerdConfigPath()
	cc := &ContainerdConfig{ConfigFile: path, Mirrors: []Mirror{}}
	var doc map[string]any
	if bin := o.containerdBin(); bin != "" {
		if out, err := run(ctx, o.Timeout, bin, "--config", path, "config", "dump"); err == nil {
			if err := toml.Unmarshal([]byte(out), &doc); err == nil {
				cc.Source = "containerd config dump (" + bin + ")"
			} else {
				doc = nil
			}
		}
	}
	if doc == nil {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			cc.Source, doc = "defaults", map[string]any{}
		} else {
			var err error
			if doc, cc.Imports, err = loadContainerdFile(o, path); err != nil {
				cc.Error = err.Error()
				return cc
			}
			cc.Source = "file"
		}
	} else {
		for _, i := range strs(doc["imports"]) {
			if i != path {
				cc.Imports = append(cc.Imports, i)
			}
		}
	}
	// The document's version decides where the settings are read; the
	// file's decides the table names the fixes give (a version 2 file on
	// containerd 2.x is edited in its version 2 tables, though config dump
	// prints them migrated).
	docVersion := int(num(doc["version"], 1))
	cc.Version = docVersion
	if fdoc, err := readTOML(path); err == nil && cc.Source != "file" {
		cc.Version = int(num(fdoc["version"], 1))
	}
	cc.Major = major
	if cc.Major == 0 {
		cc.Major = 1
		if cc.Version >= 3 {
			cc.Major = 2
		}
	}
	if cc.Source == "defaults" {
		cc.Version, docVersion = 2, 2
		if cc.Major >= 2 {
			cc.Version, docVersion = 3, 3
		}
	}
	resolveContainerd(cc, doc, docVersion)
	if fdoc, err := readTOML(path); err == nil && cc.Major >= 2 && cc.Version == 2 {
		ctr := asMap(asMap(asMap(asMap(fdoc["plugins"])[criV2])["containerd"]))
		if _, runtimes := ctr["runtimes"]; !runtimes {
			for _, key := range []string{"snapshotter", "discard_unpacked_layers"} {
				if v, set := ctr[key]; set {
					cc.Ignored = append(cc.Ignored, fmt.Sprintf("%s = %v", key, v))
				}
			}
		}
	}
	cc.Mirrors = append(cc.Mirrors, readHostsDirs(o, cc.RegistryConfigPath)...)
	return cc
}

// containerdBin is the containerd to ask for `config dump`: explicit
// ("-" none), else containerd on PATH when the live root is read.
func (o *GatherOptions) containerdBin() string {
	switch {
	case o.ContainerdBin == "-":
		return ""
	case o.ContainerdBin != "":
		return o.ContainerdBin
	case o.Root == "/" && o.ContainerdConfig == "":
		p, _ := exec.LookPath("containerd")
		return p
	}
	return ""
}

// loadContainerdFile reads a config and its imports the way containerd
// merges them: imports (globs, relative to the importing file) are read
// after the file, and each plugin table an import sets replaces the
// file's whole table for that plugin (containerd's mergo merge), other
// top-level keys are overridden.
func loadContainerdFile(o *GatherOptions, path string) (map[string]any, []string, error) {
	doc, err := readTOML(path)
	if err != nil {
		return nil, nil, err
	}
	var imports []string
	for _, pat := range strs(doc["imports"]) {
		if !filepath.IsAbs(pat) {
			pat = filepath.Join(filepath.Dir(path), pat)
		} else if o.Root != "/" && !strings.HasPrefix(pat, o.Root) {
			pat = o.path(pat)
		}
		matches, err := filepath.Glob(pat)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: imports: %v", path, err)
		}
		sort.Strings(matches)
		for _, m := range matches {
			if m == path {
				continue
			}
			sub, err := readTOML(m)
			if err != nil {
				return nil, nil, err
			}
			imports = append(imports, m)
			for k, v := range sub {
				if k == "plugins" {
					pl, _ := doc["plugins"].(map[string]any)
					if pl == nil {
						pl = map[string]any{}
						doc["plugins"] = pl
					}
					for pk, pv := range asMap(v) {
						pl[pk] = pv
					}
					continue
				}
				if k != "imports" && k != "version" {
					doc[k] = v
				}
			}
		}
	}
	return doc, imports, nil
}

func readTOML(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := toml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return doc, nil
}

// resolveContainerd reads the pull settings out of a config document,
// applying containerd's defaults for keys left out.
func resolveContainerd(cc *ContainerdConfig, doc map[string]any, docVersion int) {
	for _, d := range strs(doc["disabled_plugins"]) {
		if d == criV2 || d == criImages || d == "cri" {
			cc.CRIDisabled = true
		}
	}
	pl := asMap(doc["plugins"])
	k := keys{cc}
	// Table names as the file spells them: version 1 files name the CRI
	// plugin "cri", version 2 its full id, version 3 and later split it.
	cri := criV2
	if cc.Version < 2 {
		cri = "cri"
	}
	criTable := fmt.Sprintf("plugins.%q", cri)
	if cc.Version >= 3 {
		criTable = fmt.Sprintf("plugins.%q", criImages)
	}
	cc.ImagesTable = criTable
	if cc.Version < 3 {
		cc.ImagesTable = criTable + ".containerd"
	}
	var img map[string]any
	if docVersion >= 3 {
		img = asMap(pl[criImages])
		cc.Snapshotter = k.str(img, cc.ImagesTable, "snapshotter", "overlayfs")
		cc.DiscardUnpackedLayers = k.bool(img, cc.ImagesTable, "discard_unpacked_layers")
	} else {
		criMap := asMap(pl[criV2])
		if docVersion < 2 && criMap == nil {
			criMap = asMap(pl["cri"])
		}
		ctr := asMap(criMap["containerd"])
		if _, runtimes := ctr["runtimes"]; cc.Major < 2 || runtimes {
			// containerd 2.x (2.4's images plugin migration) copies these
			// two only from a version 2 config that also has a runtimes
			// table; without one it runs with the defaults.
			cc.Snapshotter = k.str(ctr, cc.ImagesTable, "snapshotter", "overlayfs")
			cc.DiscardUnpackedLayers = k.bool(ctr, cc.ImagesTable, "discard_unpacked_layers")
		} else {
			cc.Snapshotter = "overlayfs"
		}
		// containerd 2.x migrates these keys of the CRI table to the images
		// plugin; 1.x reads them there.
		img = criMap
	}
	tableOf := func() string { return criTable }
	criDownloads := k.int(img, tableOf(), "max_concurrent_downloads", defaultDownloads)
	cc.ImagePullWithSyncFs = k.bool(img, tableOf(), "image_pull_with_sync_fs")
	cc.UseLocalImagePull = k.bool(img, tableOf(), "use_local_image_pull")
	reg := asMap(img["registry"])
	cc.RegistryConfigPath = k.str(reg, tableOf()+".registry", "config_path", "")
	for _, host := range sortedKeys(asMap(reg["mirrors"])) {
		for _, ep := range strs(asMap(asMap(reg["mirrors"])[host])["endpoint"]) {
			m := Mirror{Registry: host, File: cc.ConfigFile + " " + tableOf() + ".registry.mirrors", URL: redactURL(ep)}
			recognize(&m, nil)
			cc.Mirrors = append(cc.Mirrors, m)
		}
	}
	if cc.Major < 2 {
		cc.LocalPull, cc.LocalPullReason = true, "containerd 1.x pulls in the CRI plugin"
		cc.MaxConcurrentDownloads, cc.MaxConcurrentDownloadsKey = criDownloads, tableOf()+".max_concurrent_downloads"
		return
	}
	// containerd 2.x pulls through the transfer service unless
	// use_local_image_pull is set or a CRI setting the transfer service
	// does not support forces the local pull (containerd 2.4's
	// CheckLocalImagePullConfigs, in its order).
	tr := asMap(pl[transferV3])
	switch {
	case cc.UseLocalImagePull:
		cc.LocalPullReason = "use_local_image_pull = true"
	case cc.DiscardUnpackedLayers:
		cc.LocalPullReason = "discard_unpacked_layers = true is not supported by the transfer service"
	case len(asMap(reg["mirrors"])) > 0:
		cc.LocalPullReason = "registry.mirrors is not supported by the transfer service"
	case criDownloads != defaultDownloads:
		cc.LocalPullReason = fmt.Sprintf("max_concurrent_downloads = %d in the CRI images table (the transfer service reads its own)", criDownloads)
	case cc.ImagePullWithSyncFs:
		cc.LocalPullReason = "image_pull_with_sync_fs = true is not supported by the transfer service"
	}
	cc.LocalPull = cc.LocalPullReason != ""
	if cc.LocalPull {
		cc.MaxConcurrentDownloads, cc.MaxConcurrentDownloadsKey = criDownloads, tableOf()+".max_concurrent_downloads"
		cc.ConcurrentLayerFetchBuffer = k.int(img, tableOf(), "concurrent_layer_fetch_buffer", 0)
		cc.ConcurrentLayerFetchBufferKey = tableOf() + ".concurrent_layer_fetch_buffer"
	} else {
		cc.ConcurrentLayerFetchBuffer = k.int(tr, fmt.Sprintf("plugins.%q", transferV3), "concurrent_layer_fetch_buffer", 0)
		cc.ConcurrentLayerFetchBufferKey = fmt.Sprintf("plugins.%q.concurrent_layer_fetch_buffer", transferV3)
		cc.MaxConcurrentDownloads = k.int(tr, fmt.Sprintf("plugins.%q", transferV3), "max_concurrent_downloads", defaultDownloads)
		cc.MaxConcurrentDownloadsKey = fmt.Sprintf("plugins.%q.max_concurrent_downloads", transferV3)
		// CRI pulls through the transfer service still resolve with the
		// images table's registry.config_path (containerd 2.4's
		// pullImageWithTransferService); the transfer plugin's own
		// config_path is for other clients of the service.
		cc.MaxConcurrentUnpacks = k.int(tr, fmt.Sprintf("plugins.%q", transferV3), "max_concurrent_unpacks", defaultTransferUnpacks)
	}
}

// readHostsDirs reads every <dir>/<registry>/hosts.toml under the
// ':'-separated config_path for mirror hosts (registry.ReadHostsDirs,
// the reader kiln's own pulls use). Header values are never kept: they
// may carry registry credentials.
func readHostsDirs(o *GatherOptions, configPath string) []Mirror {
	var dirs []string
	for _, dir := range strings.Split(configPath, ":") {
		if dir != "" {
			dirs = append(dirs, o.underRoot(dir))
		}
	}
	var out []Mirror
	for _, hf := range registry.ReadHostsDirs(dirs...) {
		if hf.Err != nil {
			out = append(out, Mirror{Registry: hf.Registry, File: hf.File, Why: "unreadable: " + hf.Err.Error()})
			continue
		}
		hosts := slices.Clone(hf.Hosts)
		slices.SortFunc(hosts, func(a, b registry.HostsEntry) int { return strings.Compare(a.URL, b.URL) })
		for _, h := range hosts {
			m := Mirror{Registry: hf.Registry, File: hf.File, URL: redactURL(h.URL), Capabilities: h.Capabilities}
			recognize(&m, h.HeaderKeys)
			out = append(out, m)
		}
	}
	return out
}

// underRoot maps an absolute host path under Root.
func (o *GatherOptions) underRoot(p string) string {
	if o.Root == "/" || strings.HasPrefix(p, o.Root) {
		return p
	}
	return o.path(p)
}

// recognize names the peer-to-peer mirror a URL is: Dragonfly when its
// hosts.toml entry sends the X-Dragonfly-Registry header (what dfinit
// writes) or it is a loopback proxy on dfdaemon's port 65001; Spegel on
// its ports 30020/30021.
func recognize(m *Mirror, header []string) {
	for _, k := range header {
		if strings.EqualFold(k, "X-Dragonfly-Registry") {
			m.Kind, m.Why = "dragonfly", "header X-Dragonfly-Registry"
			return
		}
	}
	u, err := url.Parse(m.URL)
	if err != nil || u.Host == "" {
		return
	}
	port := u.Port()
	switch {
	case spegelPorts[port]:
		m.Kind, m.Why = "spegel", "port "+port+" (Spegel's registry port)"
	case dragonflyPorts[port] && registry.IsLoopback(u.Host):
		m.Kind, m.Why = "dragonfly", "loopback port "+port+" (dfdaemon's proxy)"
	}
}

// redactURL drops user info (user:password@) from a mirror URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

// readDockerDaemonConfig reads daemon.json's pull settings.
func readDockerDaemonConfig(o *GatherOptions) *DockerDaemonConfig {
	path := o.DockerDaemonConfig
	if path == "" {
		path = o.path("etc/docker/daemon.json")
	}
	d := &DockerDaemonConfig{ConfigFile: path, MaxConcurrentDownloads: defaultDownloads, MaxConcurrentUploads: defaultDockerUploads, RegistryMirrors: []Mirror{}}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return d
	}
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.Exists = true
	var raw struct {
		Downloads *int            `json:"max-concurrent-downloads"`
		Uploads   *int            `json:"max-concurrent-uploads"`
		Driver    string          `json:"storage-driver"`
		Features  map[string]bool `json:"features"`
		Mirrors   []string        `json:"registry-mirrors"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		d.Error = fmt.Sprintf("%s: %v", path, err)
		return d
	}
	if raw.Downloads != nil {
		d.MaxConcurrentDownloads = *raw.Downloads
	}
	if raw.Uploads != nil {
		d.MaxConcurrentUploads = *raw.Uploads
	}
	d.StorageDriver, d.ContainerdSnapshotter = raw.Driver, raw.Features["containerd-snapshotter"]
	for _, m := range raw.Mirrors {
		mm := Mirror{Registry: "docker.io", File: path + " registry-mirrors", URL: redactURL(m)}
		recognize(&mm, nil)
		d.RegistryMirrors = append(d.RegistryMirrors, mm)
	}
	return d
}

// keys reads typed settings, noting a key of the wrong type (containerd
// would refuse the config) with the file, table and key.
type keys struct{ cc *ContainerdConfig }

func (k keys) bad(table, key, want string, v any) {
	k.cc.Problems = append(k.cc.Problems, fmt.Sprintf("%s: %s.%s: want %s, got %T", k.cc.ConfigFile, table, key, want, v))
}

func (k keys) bool(m map[string]any, table, key string) bool {
	v, ok := m[key]
	if !ok {
		return false
	}
	b, isBool := v.(bool)
	if !isBool {
		k.bad(table, key, "a boolean", v)
	}
	return b
}

func (k keys) int(m map[string]any, table, key string, def int) int {
	v, ok := m[key]
	if !ok {
		return def
	}
	n, isInt := v.(int64)
	if !isInt {
		k.bad(table, key, "an integer", v)
		return def
	}
	return int(n)
}

func (k keys) str(m map[string]any, table, key, def string) string {
	v, ok := m[key]
	if !ok {
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		k.bad(table, key, "a string", v)
		return def
	}
	if s == "" {
		return def
	}
	return s
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func num(v any, def int64) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	case string:
		if i, err := strconv.ParseInt(n, 10, 64); err == nil {
			return i
		}
	}
	return def
}

func strs(v any) []string {
	l, ok := v.([]any)
	if !ok {
		return nil
	}
	out := []string{}
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// gatherRuntimeConfig reads containerd's and Docker's pull settings when
// that runtime is configured or reachable here, and the free space where
// the configured snapshotter unpacks.
func gatherRuntimeConfig(ctx context.Context, o *GatherOptions, h *Host) {
	var ctr, dock bool
	major := 0
	for _, e := range h.Engines {
		switch e.Kind {
		case EngineContainerd:
			ctr = true
			if ma, _, ok := majorMinor(e.Version); ok && e.Reachable && major == 0 {
				major = ma
			}
		case EngineDocker:
			dock = true
		}
	}
	if ctr || o.ContainerdConfig != "" || exists(o.containerdConfigPath()) {
		h.ContainerdConfig = readContainerdConfig(ctx, o, major)
		for i := range h.Engines {
			e := &h.Engines[i]
			root, loaded := e.snapRoots[h.ContainerdConfig.Snapshotter]
			if root == "" && loaded && e.DataRoot != "" {
				// containerd 1.6's native snapshotter exports no root: it
				// lives next to the content store, under containerd's root.
				root = filepath.Join(filepath.Dir(e.DataRoot), "io.containerd.snapshotter.v1."+h.ContainerdConfig.Snapshotter)
			}
			if root != "" {
				e.SnapshotRoot = root
				if _, free, _, err := statFS(root); err == nil {
					e.SnapshotRootFreeBytes = free
				}
			}
		}
	}
	if dock || o.DockerDaemonConfig != "" || exists(o.path("etc/docker/daemon.json")) {
		h.DockerConfig = readDockerDaemonConfig(o)
	}
}
