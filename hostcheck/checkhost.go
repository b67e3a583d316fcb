package hostcheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/registry"
)

// 4. NVIDIA Container Toolkit.
func (c *checker) toolkit() Item {
	it := item(IDToolkit, "NVIDIA Container Toolkit")
	t := c.h.Toolkit
	for _, b := range sortedKeys(t.Binaries) {
		it.Evidence = append(it.Evidence, fmt.Sprintf("%s at %s", b, t.Binaries[b]))
	}
	var ways []string
	if slices.Contains(t.DockerRuntimes, "nvidia") {
		ways = append(ways, "runtime nvidia in /etc/docker/daemon.json")
	}
	if t.DockerDefaultRuntime != "" {
		it.Evidence = append(it.Evidence, "docker default-runtime: "+t.DockerDefaultRuntime)
	}
	var dockerUp []Engine
	for _, e := range c.h.Engines {
		if e.Kind == EngineDocker && e.Reachable {
			dockerUp = append(dockerUp, e)
			if slices.Contains(e.Runtimes, "nvidia") {
				ways = append(ways, fmt.Sprintf("dockerd at %s reports runtime nvidia", e.Socket))
			}
		}
	}
	for _, r := range t.ContainerdRuntimes {
		if strings.HasPrefix(r, "nvidia") {
			ways = append(ways, fmt.Sprintf("containerd CRI runtime %s in /etc/containerd/config.toml", r))
		}
	}
	for _, s := range t.CDISpecs {
		if s.Kind == "nvidia.com/gpu" {
			ways = append(ways, fmt.Sprintf("CDI spec %s (%s: %s)", s.Path, s.Kind, strings.Join(s.Devices, ",")))
		}
	}
	_, hook := t.Binaries["nvidia-container-runtime-hook"]
	if hook && len(dockerUp) > 0 {
		// dockerd's --gpus calls the prestart hook itself.
		ways = append(ways, "docker run --gpus (nvidia-container-runtime-hook installed)")
	}
	it.Evidence = append(it.Evidence, ways...)
	// daemon.json names nvidia but the running dockerd does not: it was
	// not restarted after nvidia-ctk runtime configure.
	for _, e := range dockerUp {
		if slices.Contains(t.DockerRuntimes, "nvidia") && !slices.Contains(e.Runtimes, "nvidia") {
			it.Status = Warn
			it.Summary = fmt.Sprintf("daemon.json registers nvidia but dockerd at %s does not report it", e.Socket)
			it.Fix = []string{"restart dockerd (sudo systemctl restart docker) so it loads /etc/docker/daemon.json"}
			return it
		}
	}
	switch {
	case len(ways) > 0:
		it.Status, it.Summary = Pass, ways[0]
	case len(t.Binaries) > 0:
		it.Status, it.Summary = Warn, "installed but not registered with Docker or containerd and no CDI spec"
		it.Fix = []string{
			"sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
			"or for containerd: sudo nvidia-ctk runtime configure --runtime=containerd && sudo systemctl restart containerd",
			"or generate a CDI spec: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
		}
	default:
		it.Status, it.Summary = Fail, "not installed: containers get no GPU (nvidia-smi fails inside them)"
		it.Fix = []string{
			"install nvidia-container-toolkit (NVIDIA's apt/yum repository), then: sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
			"or generate a CDI spec: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
		}
	}
	return it
}

// 5. Container engine access.
func (c *checker) engine() Item {
	it := item(IDEngine, "Container engine")
	var up, down []Engine
	for _, e := range c.h.Engines {
		mode := "rootful"
		if e.Rootless {
			mode = "rootless"
		}
		if e.Reachable {
			up = append(up, e)
			ev := fmt.Sprintf("%s %s at %s (%s)", e.Kind, dashOr(e.Version, ""), e.Socket, mode)
			if len(e.Runtimes) > 0 {
				ev += ", runtimes " + strings.Join(e.Runtimes, ",")
			}
			if e.DefaultRuntime != "" {
				ev += ", default " + e.DefaultRuntime
			}
			it.Evidence = append(it.Evidence, strings.ReplaceAll(ev, "  ", " "))
		} else {
			down = append(down, e)
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s at %s: not reachable: %s", e.Kind, e.Socket, e.Error))
		}
	}
	if len(up) == 0 {
		it.Status = Fail
		if len(down) == 0 {
			it.Summary = "no Docker or containerd socket found"
			it.Fix = []string{"install and start Docker (or containerd); rootless Docker listens on $XDG_RUNTIME_DIR/docker.sock"}
		} else {
			it.Summary = fmt.Sprintf("%s socket present but not reachable", down[0].Kind)
			if strings.Contains(down[0].Error, "permission denied") {
				it.Fix = []string{"add the user to the docker group (sudo usermod -aG docker $USER, then log in again) or use rootless Docker"}
			} else {
				it.Fix = []string{fmt.Sprintf("start the engine (sudo systemctl start %s) and check its log", down[0].Kind)}
			}
		}
		return it
	}
	var run, build []string
	for _, e := range up {
		if e.Kind != EngineBuildkit {
			run = append(run, e.Kind)
		}
		if e.CanBuild {
			build = append(build, e.Kind)
		}
	}
	if len(run) == 0 {
		it.Status, it.Summary = Fail, "only buildkitd answers: images can be built but not run"
		it.Fix = []string{"install and start Docker or containerd"}
		return it
	}
	it.Status = Pass
	if len(build) > 0 {
		it.Summary = fmt.Sprintf("%s reachable; images can be built here (%s)", strings.Join(run, ", "), strings.Join(build, ", "))
	} else {
		it.Summary = fmt.Sprintf("%s reachable; run only: no builder (dockerd or buildkitd) here", strings.Join(run, ", "))
	}
	return c.pullCompression(it, up)
}

// pullCompression adds to the engine item which layer compression the
// reachable runtimes pull: zstd only when every one of them can (Docker ≥
// 23.0, containerd ≥ 1.5; an unreadable version counts as cannot), so the
// variant named works whichever engine starts the container. kiln slim
// and kiln build publish gzip under TAG and zstd under TAG-zstd. An image
// whose layers are zstd fails on a host where no runtime pulls it, and
// warns where some cannot.
func (c *checker) pullCompression(it Item, up []Engine) Item {
	var can, cannot []string
	for _, e := range up {
		ok, known := pullsZstd(e)
		if _, runtime := zstdFloor[e.Kind]; !runtime {
			continue
		}
		name := fmt.Sprintf("%s %s", e.Kind, dashOr(e.Version, "(version unknown)"))
		switch {
		case ok:
			can = append(can, name)
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s pulls zstd and gzip layers", name))
		case known:
			cannot = append(cannot, name)
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s pulls gzip layers only (zstd needs %s)", name, zstdFloorText(e.Kind)))
		default:
			cannot = append(cannot, name)
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: version unreadable, assumed to pull gzip only", name))
		}
	}
	if len(can)+len(cannot) == 0 {
		return it
	}
	c.pull = "gzip"
	if len(cannot) == 0 {
		c.pull = "zstd"
		it.Summary += "; pull the zstd variant (TAG-zstd)"
	} else {
		it.Summary += "; pull the gzip image (TAG): " + strings.Join(cannot, ", ") + " cannot pull zstd"
	}
	if c.im == nil || !slices.Contains(c.im.LayerCompression, "zstd") || len(cannot) == 0 {
		return it
	}
	fix := []string{
		"publish a gzip variant: kiln slim / kiln build --compression both (the default) writes gzip under TAG and zstd under TAG-zstd; pull TAG",
		fmt.Sprintf("or upgrade the engine (%s, %s)", zstdFloorText(EngineDocker), zstdFloorText(EngineContainerd)),
	}
	if len(can) == 0 {
		it.Status = Fail
		it.Summary = fmt.Sprintf("the image has zstd layers and %s cannot pull them", strings.Join(cannot, ", "))
	} else {
		it.Status = Warn
		it.Summary = fmt.Sprintf("the image has zstd layers: %s can pull them, %s cannot", strings.Join(can, ", "), strings.Join(cannot, ", "))
	}
	it.Fix = fix
	return it
}

// 6. Registry credentials, by presence only.
func (c *checker) registry() Item {
	it := item(IDRegistry, "Registry credentials")
	if c.im == nil || c.im.Registry == "" {
		return skip(it, "the image is not pulled from a registry")
	}
	host := registryHost(c.im.Registry)
	r := c.h.Registry
	if r.ConfigFile != "" {
		it.Evidence = append(it.Evidence, "Docker config "+r.ConfigFile)
	}
	if slices.Contains(r.Registries, host) {
		it.Status, it.Summary = Pass, fmt.Sprintf("credentials for %s present (not shown)", host)
		return it
	}
	if registry.IsLoopback(host) {
		it.Status, it.Summary = Pass, fmt.Sprintf("%s is a loopback registry; no credentials configured (usually none needed)", host)
		return it
	}
	it.Status = Warn
	if r.CredsStore != "" && !strings.HasPrefix(c.h.Source, "live:") {
		it.Summary = fmt.Sprintf("no explicit entry for %s; the credsStore %q may hold one (not asked: captured description)", host, r.CredsStore)
		return it
	}
	if e := r.HelperErrors[host]; e != "" {
		it.Summary = fmt.Sprintf("credentials for %s unknown: %s", host, e)
		it.Fix = []string{fmt.Sprintf("make the credential helper named above answer (a locked keyring? a prompt nobody sees?), or docker login %s", host)}
		return it
	}
	it.Summary = fmt.Sprintf("no credentials for %s: fine for a public image, a private one fails with 401/denied", host)
	it.Fix = []string{fmt.Sprintf("docker login %s (or a credential helper in ~/.docker/config.json)", host)}
	return it
}

// imageNeed is the disk an image takes once pulled and unpacked.
func (c *checker) imageNeed() (int64, string) {
	if c.im == nil {
		return 0, ""
	}
	if c.im.UncompressedSize > 0 {
		return c.im.UncompressedSize + c.im.CompressedSize, "layers unpacked + blobs"
	}
	if c.im.CompressedSize > 0 {
		return 3 * c.im.CompressedSize, "estimated as 3× the compressed size (layers not read)"
	}
	return 0, ""
}

// 7. Persistent volumes and image storage.
func (c *checker) volumes() Item {
	it := item(IDVolumes, "Volumes and disk")
	need, how := c.imageNeed()
	stores := 0
	worst := Pass
	set := func(s Status) {
		if s == Fail || (s == Warn && worst == Pass) {
			worst = s
		}
	}
	var sums []string
	for _, e := range c.h.Engines {
		if e.DataRoot == "" || !e.Reachable {
			continue
		}
		stores++
		ev := fmt.Sprintf("%s image store %s: %s free", e.Kind, e.DataRoot, bytesize.Format(e.DataRootFreeBytes))
		if need > 0 {
			ev += fmt.Sprintf(", image needs %s (%s)", bytesize.Format(need), how)
			if e.DataRootFreeBytes < need {
				set(Fail)
				sums = append(sums, fmt.Sprintf("%s has %s free, the image needs %s", e.DataRoot, bytesize.Format(e.DataRootFreeBytes), bytesize.Format(need)))
				if e.Kind == EngineContainerd {
					it.Fix = append(it.Fix, fmt.Sprintf("free space under %s (ctr -n k8s.io images prune --all, crictl rmi --prune) or point containerd's root at a larger disk", e.DataRoot))
				} else {
					it.Fix = append(it.Fix, fmt.Sprintf("free space under %s (docker system prune) or move Docker's data-root to a larger disk", e.DataRoot))
				}
			}
		}
		it.Evidence = append(it.Evidence, ev)
		if e.SnapshotRoot != "" && e.SnapshotRoot != e.DataRoot {
			ev := fmt.Sprintf("%s snapshots %s: %s free", e.Kind, e.SnapshotRoot, bytesize.Format(e.SnapshotRootFreeBytes))
			if c.im != nil && c.im.UncompressedSize > 0 {
				ev += fmt.Sprintf(", layers unpack to %s", bytesize.Format(c.im.UncompressedSize))
				if e.SnapshotRootFreeBytes < c.im.UncompressedSize {
					set(Fail)
					sums = append(sums, fmt.Sprintf("%s has %s free, the unpacked layers need %s", e.SnapshotRoot, bytesize.Format(e.SnapshotRootFreeBytes), bytesize.Format(c.im.UncompressedSize)))
					it.Fix = append(it.Fix, fmt.Sprintf("free space under %s or point containerd's root at a larger disk", e.SnapshotRoot))
				}
			}
			it.Evidence = append(it.Evidence, ev)
		}
	}
	for _, v := range c.h.Volumes {
		if !v.Exists {
			set(Fail)
			sums = append(sums, v.Path+" does not exist")
			it.Evidence = append(it.Evidence, fmt.Sprintf("%s: %s", v.Path, dashOr(v.Error, "missing")))
			it.Fix = append(it.Fix, fmt.Sprintf("create %s (mkdir -p) or mount the persistent disk there", v.Path))
			continue
		}
		ev := fmt.Sprintf("%s: %s, %s free of %s", v.Path, dashOr(v.FSType, "unknown filesystem"), bytesize.Format(v.FreeBytes), bytesize.Format(v.TotalBytes))
		if v.Writable {
			ev += ", writable"
		}
		it.Evidence = append(it.Evidence, ev)
		if !v.Writable {
			set(Fail)
			sums = append(sums, v.Path+" is not writable")
			it.Evidence = append(it.Evidence, v.Path+": "+v.Error)
			it.Fix = append(it.Fix, fmt.Sprintf("make %s writable for the container's user (chown/chmod, or mount it read-write)", v.Path))
		}
		if tmpFS[v.FSType] {
			set(Warn)
			sums = append(sums, fmt.Sprintf("%s is %s: gone after a reboot", v.Path, v.FSType))
			it.Fix = append(it.Fix, fmt.Sprintf("put %s on a persistent disk", v.Path))
		}
		if networkFS[v.FSType] {
			set(Warn)
			sums = append(sums, fmt.Sprintf("%s is %s: model loads read over the network", v.Path, v.FSType))
		}
		if c.o.WeightsBytes > 0 && v.FreeBytes < c.o.WeightsBytes {
			set(Fail)
			sums = append(sums, fmt.Sprintf("%s has %s free, the weights need %s", v.Path, bytesize.Format(v.FreeBytes), bytesize.Format(c.o.WeightsBytes)))
			it.Fix = append(it.Fix, fmt.Sprintf("free %s on %s or use a larger volume", bytesize.Format(c.o.WeightsBytes-v.FreeBytes), v.Path))
		}
	}
	if len(c.h.Volumes) == 0 && stores == 0 {
		return skip(it, "no --volume given and no engine image store known")
	}
	it.Status = worst
	if len(sums) > 0 {
		it.Summary = strings.Join(sums, "; ")
	} else {
		var parts []string
		if len(c.h.Volumes) > 0 {
			parts = append(parts, fmt.Sprintf("%d volume(s) exist and are writable", len(c.h.Volumes)))
			if c.o.WeightsBytes > 0 {
				parts[0] += fmt.Sprintf(", room for %s of weights", bytesize.Format(c.o.WeightsBytes))
			}
		}
		if stores > 0 && need > 0 {
			parts = append(parts, "the image store has room for the image")
		} else if stores > 0 {
			parts = append(parts, "image store free space reported")
		}
		it.Summary = strings.Join(parts, "; ")
	}
	return it
}

// 8. Docker Compose for multi-container setups.
func (c *checker) compose() Item {
	it := item(IDCompose, "Docker Compose")
	if c.h.Compose == nil {
		it.Status, it.Summary = Warn, "not installed: multi-container setups (docker compose up) are unavailable"
		it.Fix = []string{"install the Docker Compose plugin (docker-compose-plugin) or docker-compose"}
		return it
	}
	it.Status = Pass
	it.Summary = fmt.Sprintf("Docker Compose %s at %s", dashOr(c.h.Compose.Version, "(version unknown)"), c.h.Compose.Path)
	return it
}
