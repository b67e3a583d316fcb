package hostcheck_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testdaemon"

	"github.com/kiln-build/kiln/hostcheck"
)

// secret is a registry credential in a hosts.toml header and a mirror
// URL: it must appear nowhere in the report.
const secret = "s3cr3t-token-do-not-print"

// spegelHosts is the hosts.toml Spegel writes for docker.io: the node's
// two Spegel ports, pull and resolve, then the upstream.
const spegelHosts = `server = "https://registry-1.docker.io"

[host."http://10.0.0.5:30020"]
  capabilities = ["pull", "resolve"]
  [host."http://10.0.0.5:30020".header]
    Authorization = ["Bearer ` + secret + `"]

[host."http://10.0.0.5:30021"]
  capabilities = ["pull", "resolve"]
`

// dragonflyHosts is what Dragonfly's dfinit writes: the local proxy with
// the X-Dragonfly-Registry header naming the upstream.
const dragonflyHosts = `server = "https://ghcr.io"

[host."http://127.0.0.1:4001"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
  [host."http://127.0.0.1:4001".header]
    X-Dragonfly-Registry = ["https://ghcr.io"]
`

// TestRuntimeConfigFiles reads containerd configs (1.6's version 2 and
// 2.x's version 3, with imports, hosts.toml mirrors) and daemon.json files
// from a temporary root and checks the reported settings, the verdict and
// that each finding names the setting to change.
func TestRuntimeConfigFiles(t *testing.T) {
	cases := []struct {
		name       string
		files      map[string]string // path under the root → content
		layers     int
		check      func(t *testing.T, h *hostcheck.Host)
		status     hostcheck.Status
		summary    []string // substrings of the item's summary
		evidence   []string // substrings of some evidence line
		fix        []string // substrings of some fix
		noEvidence []string
	}{
		{
			name: "1.6 v2 defaults, Spegel mirror, 12 layers",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 2
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
`,
				"etc/containerd/certs.d/docker.io/hosts.toml": spegelHosts,
			},
			layers: 12,
			check: func(t *testing.T, h *hostcheck.Host) {
				cc := h.ContainerdConfig
				if cc == nil || cc.Source != "file" || cc.Version != 2 || cc.Major != 1 || cc.Snapshotter != "overlayfs" || cc.DiscardUnpackedLayers ||
					cc.MaxConcurrentDownloads != 3 || !cc.LocalPull || len(cc.Mirrors) != 2 || cc.Mirrors[0].Kind != "spegel" || cc.Mirrors[0].Registry != "docker.io" ||
					strings.Join(cc.Mirrors[0].Capabilities, ",") != "pull,resolve" {
					t.Errorf("containerd config = %+v", cc)
				}
			},
			status:   hostcheck.Warn,
			summary:  []string{"containerd max_concurrent_downloads = 3 of an image with 12 layers"},
			evidence: []string{"containerd mirror for docker.io: http://10.0.0.5:30020 (pull,resolve): spegel, recognized by port 30020", "discard_unpacked_layers = false"},
			fix:      []string{`raise plugins."io.containerd.grpc.v1.cri".max_concurrent_downloads from 3 to 8: ~2.7× as many of the image's 12 layers fetched at once, then restart containerd`},
		},
		{
			name: "1.6 v2 discard true with Spegel fails",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 2
[plugins."io.containerd.grpc.v1.cri"]
  max_concurrent_downloads = 10
[plugins."io.containerd.grpc.v1.cri".containerd]
  discard_unpacked_layers = true
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
`,
				"etc/containerd/certs.d/docker.io/hosts.toml": spegelHosts,
			},
			layers:  12,
			status:  hostcheck.Fail,
			summary: []string{"containerd discard_unpacked_layers = true: Spegel cannot serve layers this node unpacked"},
			fix:     []string{`set discard_unpacked_layers = false in [plugins."io.containerd.grpc.v1.cri".containerd] and restart containerd`},
		},
		{
			name: "1.6 v2 discard true without a mirror warns",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 2
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[plugins."io.containerd.grpc.v1.cri".containerd]
  discard_unpacked_layers = true
  snapshotter = "native"
`,
			},
			status:   hostcheck.Warn,
			summary:  []string{"discard_unpacked_layers = true: CRI pulls drop each layer's blob once unpacked", "snapshotter = native"},
			evidence: []string{"config_path unset: no hosts.toml mirrors are read", "CRI plugin is disabled (disabled_plugins)"},
			fix:      []string{`set snapshotter = "overlayfs"`},
		},
		{
			name: "1.6 imports replace the CRI table",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 2
imports = ["conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri".containerd]
  discard_unpacked_layers = true
`,
				"etc/containerd/conf.d/50-pull.toml": `version = 2
[plugins."io.containerd.grpc.v1.cri"]
  max_concurrent_downloads = 6
`,
			},
			layers: 4,
			check: func(t *testing.T, h *hostcheck.Host) {
				cc := h.ContainerdConfig
				if cc.DiscardUnpackedLayers || cc.MaxConcurrentDownloads != 6 || len(cc.Imports) != 1 || !strings.HasSuffix(cc.Imports[0], "conf.d/50-pull.toml") {
					t.Errorf("containerd config = %+v", cc)
				}
			},
			status:   hostcheck.Pass,
			summary:  []string{"containerd: overlayfs, max_concurrent_downloads 6"},
			evidence: []string{"imports ", "50-pull.toml"},
		},
		{
			name: "2.x v3 transfer service, Dragonfly mirror",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 3
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "/etc/containerd/certs.d"
[plugins."io.containerd.transfer.v1.local"]
  max_concurrent_downloads = 10
  max_concurrent_unpacks = 4
  concurrent_layer_fetch_buffer = 67108864
`,
				"etc/containerd/certs.d/ghcr.io/hosts.toml": dragonflyHosts,
			},
			layers: 12,
			check: func(t *testing.T, h *hostcheck.Host) {
				cc := h.ContainerdConfig
				if cc.Major != 2 || cc.LocalPull || cc.MaxConcurrentDownloads != 10 || cc.MaxConcurrentUnpacks != 4 ||
					cc.MaxConcurrentDownloadsKey != `plugins."io.containerd.transfer.v1.local".max_concurrent_downloads` || len(cc.Mirrors) != 1 || cc.Mirrors[0].Kind != "dragonfly" {
					t.Errorf("containerd config = %+v", cc)
				}
			},
			status:  hostcheck.Pass,
			summary: []string{"Dragonfly mirror for ghcr.io"},
			evidence: []string{"pulls through the transfer service", "dragonfly, recognized by header X-Dragonfly-Registry", "max_concurrent_unpacks = 4",
				`plugins."io.containerd.transfer.v1.local".concurrent_layer_fetch_buffer = 67108864: each layer is fetched in parallel chunks`},
		},
		{
			// containerd 2.x's default: every layer over one connection.
			name: "2.x v3 transfer service without concurrent_layer_fetch_buffer warns",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 3
[plugins."io.containerd.transfer.v1.local"]
  max_concurrent_downloads = 8
`,
			},
			check: func(t *testing.T, h *hostcheck.Host) {
				if cc := h.ContainerdConfig; cc.ConcurrentLayerFetchBuffer != 0 || cc.ConcurrentLayerFetchBufferKey != `plugins."io.containerd.transfer.v1.local".concurrent_layer_fetch_buffer` {
					t.Errorf("containerd config = %+v", cc)
				}
			},
			status:   hostcheck.Warn,
			summary:  []string{"containerd concurrent_layer_fetch_buffer is off: each layer is fetched over one connection"},
			evidence: []string{"parallel layer fetch is off"},
			fix:      []string{`set plugins."io.containerd.transfer.v1.local".concurrent_layer_fetch_buffer = 67108864 (64 MiB chunks) and restart containerd (≥ 2.1)`},
		},
		{
			// A local CRI pull reads the key from the images table.
			name: "2.x local pull reads concurrent_layer_fetch_buffer from the CRI images table",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 3
[plugins."io.containerd.cri.v1.images"]
  use_local_image_pull = true
  concurrent_layer_fetch_buffer = 1024
[plugins."io.containerd.transfer.v1.local"]
  concurrent_layer_fetch_buffer = 0
`,
			},
			status:   hostcheck.Pass,
			evidence: []string{`plugins."io.containerd.cri.v1.images".concurrent_layer_fetch_buffer = 1024: each layer is fetched in parallel chunks`},
		},
		{
			name: "2.x v3 discard and sync fs force the local pull",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 3
[plugins."io.containerd.cri.v1.images"]
  discard_unpacked_layers = true
  image_pull_with_sync_fs = true
[plugins."io.containerd.transfer.v1.local"]
  max_concurrent_downloads = 10
`,
			},
			layers:   12,
			status:   hostcheck.Warn,
			summary:  []string{"image_pull_with_sync_fs = true", "max_concurrent_downloads = 3 of an image with 12 layers"},
			evidence: []string{"pulls locally (not through the transfer service): discard_unpacked_layers = true is not supported by the transfer service"},
			fix:      []string{`raise plugins."io.containerd.cri.v1.images".max_concurrent_downloads from 3 to 8`, `set discard_unpacked_layers = false in [plugins."io.containerd.cri.v1.images"]`},
		},
		{
			name: "a key of the wrong type names file, table and key",
			files: map[string]string{
				"etc/containerd/config.toml": `version = 3
[plugins."io.containerd.transfer.v1.local"]
  max_concurrent_downloads = "ten"
`,
			},
			status:  hostcheck.Warn,
			summary: []string{`etc/containerd/config.toml: plugins."io.containerd.transfer.v1.local".max_concurrent_downloads: want an integer, got string`},
		},
		{
			name: "unparsable config names the file",
			files: map[string]string{
				"etc/containerd/config.toml": "version = 2\n[plugins\n",
			},
			status:  hostcheck.Warn,
			summary: []string{"containerd config unreadable: ", "etc/containerd/config.toml"},
		},
		{
			name: "daemon.json: vfs, Dragonfly registry mirror, defaults",
			files: map[string]string{
				"etc/docker/daemon.json": `{"storage-driver": "vfs", "registry-mirrors": ["http://kiln:` + secret + `@127.0.0.1:65001"], "features": {"containerd-snapshotter": true}}`,
			},
			layers: 5,
			check: func(t *testing.T, h *hostcheck.Host) {
				d := h.DockerConfig
				if d == nil || !d.Exists || d.MaxConcurrentDownloads != 3 || d.MaxConcurrentUploads != 5 || d.StorageDriver != "vfs" || !d.ContainerdSnapshotter ||
					len(d.RegistryMirrors) != 1 || d.RegistryMirrors[0].Kind != "dragonfly" || d.RegistryMirrors[0].URL != "http://127.0.0.1:65001" {
					t.Errorf("docker config = %+v", d)
				}
			},
			status:   hostcheck.Warn,
			summary:  []string{"Docker max-concurrent-downloads = 3 of an image with 5 layers", "Docker storage driver vfs"},
			evidence: []string{"Docker mirror for docker.io: http://127.0.0.1:65001: dragonfly, recognized by loopback port 65001", "containerd-snapshotter = true"},
			fix:      []string{"raise max-concurrent-downloads in ", "from 3 to 5: ~1.7×", `"storage-driver": "overlay2"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, content := range tc.files {
				f := filepath.Join(root, p)
				os.MkdirAll(filepath.Dir(f), 0o755)
				if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: root, NvidiaSMI: "-", ContainerdBin: "-", ContainerdSockets: []string{}, DockerSockets: []string{}, BuildkitSockets: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, h)
			}
			var im *hostcheck.Image
			if tc.layers > 0 {
				im = &hostcheck.Image{Ref: "example/img:1", Source: "image", Layers: tc.layers}
			}
			r := hostcheck.Check(h, im, hostcheck.Options{})
			it := r.Item(hostcheck.IDRuntime)
			assertItem(t, it, tc.status, tc.summary, tc.evidence, tc.fix)
			b, _ := json.Marshal(r)
			if strings.Contains(string(b), secret) {
				t.Errorf("the report prints a credential: %s", b)
			}
			// The captured description round-trips the settings.
			hb, _ := h.Marshal()
			h2, err := hostcheck.ParseHost("host.json", hb)
			if err != nil {
				t.Fatal(err)
			}
			if it2 := hostcheck.Check(h2, im, hostcheck.Options{}).Item(hostcheck.IDRuntime); it2.Status != it.Status || it2.Summary != it.Summary {
				t.Errorf("from the captured description: %s %q, live %s %q", it2.Status, it2.Summary, it.Status, it.Summary)
			}
		})
	}
}

// TestRuntimeSettingsSkip: no runtime config and no engine: skipped.
func TestRuntimeSettingsSkip(t *testing.T) {
	h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: t.TempDir(), NvidiaSMI: "-", ContainerdSockets: []string{}, DockerSockets: []string{}, BuildkitSockets: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if it := hostcheck.Check(h, nil, hostcheck.Options{}).Item(hostcheck.IDRuntime); it.Status != hostcheck.Skip || h.ContainerdConfig != nil || h.DockerConfig != nil {
		t.Errorf("runtime-settings = %+v", it)
	}
}

func assertItem(t *testing.T, it *hostcheck.Item, status hostcheck.Status, summary, evidence, fix []string) {
	t.Helper()
	if it == nil {
		t.Fatal("no item")
	}
	bad := it.Status != status
	for _, s := range summary {
		bad = bad || !strings.Contains(it.Summary, s)
	}
	ev, fx := strings.Join(it.Evidence, "\n"), strings.Join(it.Fix, "\n")
	for _, s := range evidence {
		bad = bad || !strings.Contains(ev, s)
	}
	for _, s := range fix {
		bad = bad || !strings.Contains(fx, s)
	}
	if bad {
		t.Errorf("item %s: %s %q\nevidence:\n%s\nfix:\n%s", it.ID, it.Status, it.Summary, ev, fx)
	}
}

// TestRuntimeSettingsRealContainerd starts a real containerd (Debian's
// 1.6, and the 2.x scripts/containerd2.sh builds when its binary is in
// /var/cache/kiln-containerd or KILN_CONTAINERD2_BIN) with a config this
// test writes — discard_unpacked_layers = true, five concurrent
// downloads, the native snapshotter, a Spegel mirror in hosts.toml — and
// checks what host check reports: the settings from `containerd config
// dump` (2.x migrates the version 2 tables), the content and snapshot
// roots the running daemon reports over introspection, and the verdict.
func TestRuntimeSettingsRealContainerd(t *testing.T) {
	bins := map[string]string{"1.6": ""}
	if p := os.Getenv("KILN_CONTAINERD2_BIN"); p != "" {
		bins["2.x"] = p
	} else if m, _ := filepath.Glob("/var/cache/kiln-containerd/v2*/containerd"); len(m) > 0 {
		bins["2.x"] = m[len(m)-1]
	}
	for _, name := range []string{"1.6", "2.x"} {
		bin, ok := bins[name]
		t.Run(name, func(t *testing.T) {
			if !ok {
				t.Skip("no containerd 2.x binary: build it with bash scripts/containerd2.sh build, or set KILN_CONTAINERD2_BIN")
			}
			if bin != "" {
				t.Setenv("KILN_CONTAINERD_BIN", bin)
			}
			// The hosts directory lies under the root host check reads, at
			// the absolute path containerd is given.
			root := t.TempDir()
			certs := filepath.Join(root, "etc/containerd/certs.d")
			os.MkdirAll(filepath.Join(certs, "docker.io"), 0o755)
			if err := os.WriteFile(filepath.Join(certs, "docker.io/hosts.toml"), []byte(spegelHosts), 0o644); err != nil {
				t.Fatal(err)
			}
			cd := testdaemon.StartContainerd(t, testdaemon.EnableCRI(), testdaemon.ExtraConfig(`
[plugins."io.containerd.grpc.v1.cri"]
  max_concurrent_downloads = 5
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "native"
  discard_unpacked_layers = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "`+certs+`"
`))
			gather := func(bin string) *hostcheck.Host {
				h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: root, NvidiaSMI: "-", ContainerdSockets: []string{cd.Socket},
					DockerSockets: []string{}, BuildkitSockets: []string{}, ContainerdConfig: cd.Config, ContainerdBin: bin, Timeout: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if h.ContainerdConfig == nil {
					t.Fatal("no containerd config reported")
				}
				return h
			}
			h := gather(cd.Bin)
			cc := h.ContainerdConfig
			// The fixes name the tables of the file (version 2), also where
			// containerd 2.x's config dump prints them migrated.
			wantKey := `plugins."io.containerd.grpc.v1.cri".max_concurrent_downloads`
			wantTable := `plugins."io.containerd.grpc.v1.cri".containerd`
			if !strings.HasPrefix(cc.Source, "containerd config dump") || cc.Version != 2 || cc.Major != cd.Major || cc.Snapshotter != "native" || !cc.DiscardUnpackedLayers ||
				cc.MaxConcurrentDownloads != 5 || cc.MaxConcurrentDownloadsKey != wantKey || cc.ImagesTable != wantTable || !cc.LocalPull ||
				cc.RegistryConfigPath != certs || len(cc.Mirrors) != 2 || cc.Mirrors[0].Kind != "spegel" {
				t.Errorf("containerd %d config = %+v", cd.Major, cc)
			}
			// Reading the file itself (no binary) gives what the daemon's
			// own config dump gives.
			fc := gather("-").ContainerdConfig
			if fc.Source != "file" || fc.Snapshotter != cc.Snapshotter || fc.DiscardUnpackedLayers != cc.DiscardUnpackedLayers || fc.MaxConcurrentDownloads != cc.MaxConcurrentDownloads ||
				fc.MaxConcurrentDownloadsKey != cc.MaxConcurrentDownloadsKey || fc.LocalPull != cc.LocalPull || fc.LocalPullReason != cc.LocalPullReason || len(fc.Mirrors) != len(cc.Mirrors) {
				t.Errorf("file read %+v\nconfig dump %+v", fc, cc)
			}
			var e *hostcheck.Engine
			for i := range h.Engines {
				if h.Engines[i].Kind == hostcheck.EngineContainerd {
					e = &h.Engines[i]
				}
			}
			if e == nil || !e.Reachable || e.DataRoot != filepath.Join(cd.Root, "io.containerd.content.v1.content") || e.DataRootFreeBytes <= 0 ||
				e.SnapshotRoot != filepath.Join(cd.Root, "io.containerd.snapshotter.v1.native") || e.SnapshotRootFreeBytes <= 0 {
				t.Errorf("containerd engine = %+v", e)
			}
			im := &hostcheck.Image{Ref: "example/img:1", Source: "image", Layers: 12, CompressedSize: 1 << 20, UncompressedSize: 3 << 20}
			r := hostcheck.Check(h, im, hostcheck.Options{})
			assertItem(t, r.Item(hostcheck.IDRuntime), hostcheck.Fail,
				[]string{"Spegel cannot serve layers this node unpacked", "snapshotter = native", "max_concurrent_downloads = 5 of an image with 12 layers"},
				[]string{"containerd mirror for docker.io: http://10.0.0.5:30020 (pull,resolve): spegel"},
				[]string{"set discard_unpacked_layers = false in [" + wantTable + "]", "raise " + wantKey + " from 5 to 8: ~1.6×"})
			assertItem(t, r.Item(hostcheck.IDVolumes), hostcheck.Pass, nil,
				[]string{"containerd image store " + e.DataRoot + ": ", "containerd snapshots " + e.SnapshotRoot + ": "}, nil)
		})
	}
}

// TestRuntimeSettingsV2WithoutRuntimes: a version 2 config that sets
// snapshotter and discard_unpacked_layers but has no runtimes table.
// containerd 1.6 applies both; containerd 2.x's migration drops them (it
// copies them only alongside runtimes), so the daemon runs overlayfs with
// discard off. Host check reports what each daemon does, from its config
// dump and from the file alike.
func TestRuntimeSettingsV2WithoutRuntimes(t *testing.T) {
	bins := map[string]string{"1.6": ""}
	if p := os.Getenv("KILN_CONTAINERD2_BIN"); p != "" {
		bins["2.x"] = p
	} else if m, _ := filepath.Glob("/var/cache/kiln-containerd/v2*/containerd"); len(m) > 0 {
		bins["2.x"] = m[len(m)-1]
	}
	for _, name := range []string{"1.6", "2.x"} {
		bin, ok := bins[name]
		t.Run(name, func(t *testing.T) {
			if !ok {
				t.Skip("no containerd 2.x binary: build it with bash scripts/containerd2.sh build, or set KILN_CONTAINERD2_BIN")
			}
			if bin != "" {
				t.Setenv("KILN_CONTAINERD_BIN", bin)
			}
			cd := testdaemon.StartContainerd(t, testdaemon.EnableCRI(), testdaemon.ExtraConfig(`
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "native"
  discard_unpacked_layers = true
`))
			wantSnap, wantDiscard := "native", true
			if cd.Major >= 2 {
				wantSnap, wantDiscard = "overlayfs", false
			}
			for _, b := range []string{cd.Bin, "-"} {
				h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: t.TempDir(), NvidiaSMI: "-", ContainerdSockets: []string{cd.Socket},
					DockerSockets: []string{}, BuildkitSockets: []string{}, ContainerdConfig: cd.Config, ContainerdBin: b, Timeout: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if cc := h.ContainerdConfig; cc == nil || cc.Major != cd.Major || cc.Snapshotter != wantSnap || cc.DiscardUnpackedLayers != wantDiscard {
					t.Errorf("containerd %d, bin %q: config = %+v", cd.Major, b, cc)
				}
				it := hostcheck.Check(h, nil, hostcheck.Options{}).Item(hostcheck.IDRuntime)
				if cd.Major >= 2 {
					assertItem(t, it, hostcheck.Warn, []string{"containerd 2.x ignores snapshotter = native, discard_unpacked_layers = true in " + cd.Config},
						nil, []string{`move them to a version 3 config's [plugins."io.containerd.cri.v1.images"]`})
				} else if strings.Contains(it.Summary, "ignores") {
					t.Errorf("containerd 1.6 applies both settings: %+v", it)
				}
			}
		})
	}
}
