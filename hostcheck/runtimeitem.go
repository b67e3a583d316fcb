package hostcheck

import (
	"fmt"
	"strings"
)

// suggestedDownloads is the concurrent-download limit the fixes suggest:
// one fetch per layer up to 8, past which a registry or the NIC, not the
// limit, is what a pull waits on.
const suggestedDownloads = 8

// 10. The runtimes' pull settings: what decides how fast an image pulls
// and whether what kiln warm (or Spegel) relies on stays in the stores.
// Every finding names the setting, where it lives and what changing it
// does.
func (c *checker) runtimeSettings() Item {
	it := item(IDRuntime, "Runtime pull settings")
	cc, dc := c.h.ContainerdConfig, c.h.DockerConfig
	if cc == nil && dc == nil {
		return skip(it, "no containerd or Docker config here and no engine reachable")
	}
	r := &runtimeFindings{it: &it, status: Pass}
	layers := 0
	if c.im != nil {
		layers = c.im.Layers
	}
	if cc != nil {
		c.containerdSettings(r, cc, layers)
	}
	c.erofsSettings(r)
	if dc != nil {
		c.dockerSettings(r, dc, layers)
	}
	it.Status = r.status
	if len(r.sums) > 0 {
		it.Summary = strings.Join(r.sums, "; ")
	} else {
		it.Summary = strings.Join(r.oks, "; ")
	}
	return it
}

type runtimeFindings struct {
	it     *Item
	status Status
	sums   []string // what warns or fails
	oks    []string // the summary when nothing does
}

func (r *runtimeFindings) add(s Status, sum string, fix ...string) {
	if s == Fail || (s == Warn && r.status == Pass) {
		r.status = s
	}
	r.sums = append(r.sums, sum)
	r.it.Fix = append(r.it.Fix, fix...)
}

func (r *runtimeFindings) ev(format string, a ...any) {
	r.it.Evidence = append(r.it.Evidence, fmt.Sprintf(format, a...))
}

// downloadsFix is "raise KEY to N for ~X× parallel layer fetch" when an
// image has more layers than the limit lets fetch at once.
func downloadsFix(key string, limit, layers int) (string, bool) {
	if layers <= limit || limit <= 0 {
		return "", false
	}
	to := min(layers, suggestedDownloads)
	if to <= limit {
		return "", false
	}
	return fmt.Sprintf("raise %s from %d to %d: ~%.1f× as many of the image's %d layers fetched at once", key, limit, to, float64(to)/float64(limit), layers), true
}

func (c *checker) containerdSettings(r *runtimeFindings, cc *ContainerdConfig, layers int) {
	src := cc.ConfigFile + " (" + cc.Source + ")"
	if len(cc.Imports) > 0 {
		src += ", imports " + strings.Join(cc.Imports, ", ")
	}
	if cc.Error != "" {
		r.ev("containerd config %s: %s", cc.ConfigFile, cc.Error)
		fix := fmt.Sprintf("fix %s (containerd refuses to start on a config it cannot parse; check with containerd config dump)", cc.ConfigFile)
		if strings.Contains(cc.Error, "permission denied") {
			fix = "run kiln host check as root (sudo) so it can read " + cc.ConfigFile
		}
		r.add(Warn, "containerd config unreadable: "+cc.Error, fix)
		return
	}
	r.ev("containerd config %s: version %d, read as containerd %d.x", src, cc.Version, cc.Major)
	for _, p := range cc.Problems {
		r.ev("%s", p)
		r.add(Warn, "containerd config: "+p, "fix the key's type: containerd refuses a config it cannot decode")
	}
	if len(cc.Ignored) > 0 {
		r.add(Warn, fmt.Sprintf("containerd %d.x ignores %s in %s's version 2 CRI table", cc.Major, strings.Join(cc.Ignored, ", "), cc.ConfigFile),
			fmt.Sprintf("containerd 2.x migrates snapshotter and discard_unpacked_layers out of [plugins.%q.containerd] only when that table also has runtimes: move them to a version 3 config's [plugins.%q] by hand (containerd config migrate drops them the same way), then restart containerd", criV2, criImages))
	}
	if cc.CRIDisabled {
		r.ev("containerd's CRI plugin is disabled (disabled_plugins): no Kubernetes pull goes through the CRI settings below")
	}
	tbl := "[" + cc.ImagesTable + "]"
	snap := fmt.Sprintf("containerd snapshotter = %s (%s)", cc.Snapshotter, tbl)
	for _, e := range c.h.Engines {
		if e.Kind == EngineContainerd && e.SnapshotRoot != "" {
			snap += fmt.Sprintf(", unpacks into %s", e.SnapshotRoot)
		}
	}
	r.ev("%s", snap)
	if cc.Snapshotter == "native" {
		r.add(Warn, "containerd snapshotter = native: every layer is copied in full",
			fmt.Sprintf("set snapshotter = \"overlayfs\" in %s: layers are mounted instead of copied, so unpacking takes one copy of each layer, not one per layer above it", tbl))
	}
	spegel, dragonfly := mirrorKinds(cc.Mirrors)
	if cc.RegistryConfigPath == "" {
		r.ev("containerd registry config_path unset: no hosts.toml mirrors are read (Spegel and Dragonfly need it)")
	} else {
		r.ev("containerd registry config_path = %s", cc.RegistryConfigPath)
	}
	for _, m := range cc.Mirrors {
		r.ev("%s", mirrorLine("containerd", m))
	}
	if cc.DiscardUnpackedLayers {
		fix := fmt.Sprintf("set discard_unpacked_layers = false in %s and restart containerd: layer blobs stay in the content store after unpacking, so Spegel can serve them to other nodes and layers kiln warm fetched are not garbage-collected (the store keeps the compressed layers as well as the unpacked ones)", tbl)
		if len(spegel) > 0 {
			r.add(Fail, "containerd discard_unpacked_layers = true: Spegel cannot serve layers this node unpacked (and exits at start)", fix)
		} else {
			r.add(Warn, "containerd discard_unpacked_layers = true: CRI pulls drop each layer's blob once unpacked; warmed layers do not hold", fix)
		}
	} else {
		r.ev("containerd discard_unpacked_layers = false: layer blobs stay in the content store after unpacking")
	}
	if cc.Major >= 2 {
		if cc.LocalPull {
			r.ev("containerd CRI pulls locally (not through the transfer service): %s", cc.LocalPullReason)
		} else {
			r.ev("containerd CRI pulls through the transfer service (plugins.%q)", transferV3)
		}
	}
	r.ev("containerd %s = %d", cc.MaxConcurrentDownloadsKey, cc.MaxConcurrentDownloads)
	if fix, ok := downloadsFix(cc.MaxConcurrentDownloadsKey, cc.MaxConcurrentDownloads, layers); ok {
		r.add(Warn, fmt.Sprintf("containerd max_concurrent_downloads = %d of an image with %d layers", cc.MaxConcurrentDownloads, layers), fix+", then restart containerd")
	}
	c.fetchBuffer(r, cc)
	if cc.MaxConcurrentUnpacks > 0 {
		e := fmt.Sprintf("containerd plugins.%q.max_concurrent_unpacks = %d", transferV3, cc.MaxConcurrentUnpacks)
		if cc.MaxConcurrentUnpacks == 1 && layers > 1 {
			e += fmt.Sprintf(": the %d layers unpack one at a time (containerd ≥ 2.2 unpacks more at once when raised)", layers)
		}
		r.ev("%s", e)
	}
	if cc.ImagePullWithSyncFs {
		r.add(Warn, "containerd image_pull_with_sync_fs = true: every unpacked layer is fsynced",
			fmt.Sprintf("set image_pull_with_sync_fs = false in %s for faster unpacking (it trades crash safety of freshly pulled layers for speed; containerd 2.x also pulls through the transfer service again)", tbl))
	}
	var peers []string
	if len(spegel) > 0 {
		peers = append(peers, "Spegel mirror for "+strings.Join(spegel, ", "))
	}
	if len(dragonfly) > 0 {
		peers = append(peers, "Dragonfly mirror for "+strings.Join(dragonfly, ", "))
	}
	ok := fmt.Sprintf("containerd: %s, %s %d", cc.Snapshotter, "max_concurrent_downloads", cc.MaxConcurrentDownloads)
	if len(peers) > 0 {
		ok += ", " + strings.Join(peers, ", ")
	}
	r.oks = append(r.oks, ok)
}

// minFetchBuffer is the smallest concurrent_layer_fetch_buffer containerd
// fetches a layer in parallel chunks with; suggestedFetchBuffer the chunk
// size the fix suggests.
const (
	minFetchBuffer       = 512
	suggestedFetchBuffer = 64 << 20
)

// fetchBuffer warns when containerd 2.x fetches each layer over one
// connection: a multi-GB CUDA layer then pulls at one stream's speed.
func (c *checker) fetchBuffer(r *runtimeFindings, cc *ContainerdConfig) {
	if cc.Major < 2 || cc.ConcurrentLayerFetchBufferKey == "" {
		return
	}
	if cc.ConcurrentLayerFetchBuffer >= minFetchBuffer {
		r.ev("containerd %s = %d: each layer is fetched in parallel chunks", cc.ConcurrentLayerFetchBufferKey, cc.ConcurrentLayerFetchBuffer)
		return
	}
	r.ev("containerd %s = %d: parallel layer fetch is off (containerd ≥ 2.1 turns it on at ≥ %d bytes)", cc.ConcurrentLayerFetchBufferKey, cc.ConcurrentLayerFetchBuffer, minFetchBuffer)
	r.add(Warn, "containerd concurrent_layer_fetch_buffer is off: each layer is fetched over one connection",
		fmt.Sprintf("set %s = %d (64 MiB chunks) and restart containerd (≥ 2.1): a multi-GB layer is fetched over max_concurrent_downloads connections at once, not one", cc.ConcurrentLayerFetchBufferKey, suggestedFetchBuffer))
}

func mirrorKinds(ms []Mirror) (spegel, dragonfly []string) {
	for _, m := range ms {
		switch m.Kind {
		case "spegel":
			spegel = appendOnce(spegel, m.Registry)
		case "dragonfly":
			dragonfly = appendOnce(dragonfly, m.Registry)
		}
	}
	return spegel, dragonfly
}

func mirrorLine(rt string, m Mirror) string {
	s := fmt.Sprintf("%s mirror for %s: %s", rt, m.Registry, dashOr(m.URL, "?"))
	if len(m.Capabilities) > 0 {
		s += " (" + strings.Join(m.Capabilities, ",") + ")"
	}
	if m.Kind != "" {
		s += fmt.Sprintf(": %s, recognized by %s", m.Kind, m.Why)
	} else if m.Why != "" {
		s += ": " + m.Why
	}
	return s + " [" + m.File + "]"
}

func (c *checker) dockerSettings(r *runtimeFindings, dc *DockerDaemonConfig, layers int) {
	if dc.Error != "" {
		r.ev("Docker daemon config %s: %s", dc.ConfigFile, dc.Error)
		r.add(Warn, "Docker daemon.json unreadable: "+dc.Error, fmt.Sprintf("fix %s (dockerd refuses to start on invalid JSON)", dc.ConfigFile))
		return
	}
	src := dc.ConfigFile
	if !dc.Exists {
		src += " (absent: dockerd's defaults)"
	}
	r.ev("Docker daemon config %s: max-concurrent-downloads = %d, max-concurrent-uploads = %d", src, dc.MaxConcurrentDownloads, dc.MaxConcurrentUploads)
	if fix, ok := downloadsFix("max-concurrent-downloads in "+dc.ConfigFile, dc.MaxConcurrentDownloads, layers); ok {
		r.add(Warn, fmt.Sprintf("Docker max-concurrent-downloads = %d of an image with %d layers", dc.MaxConcurrentDownloads, layers), fix+", then restart dockerd")
	}
	driver, from := dc.StorageDriver, "daemon.json storage-driver"
	var up []Engine
	for _, e := range c.h.Engines {
		if e.Kind == EngineDocker && e.Reachable {
			up = append(up, e)
			if e.StorageDriver != "" {
				driver, from = e.StorageDriver, "dockerd /info at "+e.Socket
			}
		}
	}
	if driver != "" {
		r.ev("Docker storage driver %s (%s)", driver, from)
	}
	if driver == "vfs" {
		r.add(Warn, "Docker storage driver vfs: every layer is a full copy of the ones below",
			fmt.Sprintf("set \"storage-driver\": \"overlay2\" in %s (or remove it: dockerd picks overlay2 where the kernel supports it) and restart dockerd: layers are mounted instead of copied, unpacking and disk use drop to one copy per layer (images pulled under vfs are pulled again)", dc.ConfigFile))
	}
	if dc.ContainerdSnapshotter {
		r.ev("Docker features.containerd-snapshotter = true: images live in containerd's content store and snapshotters (namespace moby), not under Docker's data-root")
	}
	for _, m := range dc.RegistryMirrors {
		r.ev("%s", mirrorLine("Docker", m))
	}
	for _, e := range up {
		ok, known := pullsZstd(e)
		switch {
		case ok:
			r.ev("Docker %s pulls zstd layers", e.Version)
		case known:
			r.ev("Docker %s pulls gzip layers only: zstd needs %s", e.Version, zstdFloorText(EngineDocker))
		}
	}
	ok := fmt.Sprintf("Docker: max-concurrent-downloads %d", dc.MaxConcurrentDownloads)
	if driver != "" {
		ok += ", " + driver
	}
	if _, df := mirrorKinds(dc.RegistryMirrors); len(df) > 0 {
		ok += ", Dragonfly mirror"
	}
	r.oks = append(r.oks, ok)
}
