package hostcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/kiln-build/kiln/internal/procgroup"
)

// GatherOptions say where Gather looks. Every path is read under Root, so
// tests point Root at a fake sysroot; nvidia-smi is found on PATH.
type GatherOptions struct {
	// Root is the host's root directory (default "/").
	Root string
	// NvidiaSMI is the nvidia-smi to run; "" finds it on PATH, "-" never
	// runs one.
	NvidiaSMI string
	// DockerSockets, ContainerdSockets and BuildkitSockets replace the
	// default sockets (under Root; DOCKER_HOST and CONTAINERD_ADDRESS when
	// set, rootless sockets under XDG_RUNTIME_DIR).
	DockerSockets, ContainerdSockets, BuildkitSockets []string
	// DockerConfig is the directory with config.json (default
	// $DOCKER_CONFIG, else ~/.docker).
	DockerConfig string
	// Registries are checked for credentials (the image's registry).
	Registries []string
	// ContainerdConfig is containerd's config file (default
	// /etc/containerd/config.toml under Root); ContainerdBin the
	// containerd whose `config dump` gives the effective config (default:
	// containerd on PATH when reading the live root with the default
	// config; "-" never runs one). DockerDaemonConfig is daemon.json
	// (default /etc/docker/daemon.json under Root).
	ContainerdConfig, ContainerdBin, DockerDaemonConfig string
	// Volumes are probed: exist, writable, filesystem, free space.
	Volumes []string
	// Timeout bounds each probe (nvidia-smi, an engine); default 10s.
	Timeout time.Duration
	// HelperTimeout bounds each credential helper asked about Registries
	// (default registry.DefaultHelperTimeout, as for every registry lookup).
	HelperTimeout time.Duration
}

func (o *GatherOptions) path(p string) string { return filepath.Join(o.Root, p) }

// Gather describes the host it runs on (or the sysroot at o.Root). It does
// not fail on what is missing — a host without a driver is a description
// the checks fail — only on options it cannot use.
func Gather(ctx context.Context, o GatherOptions) (*Host, error) {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if fi, err := os.Stat(o.Root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("--root %s: not a directory", o.Root)
	}
	h := &Host{SchemaVersion: HostSchemaVersion, Source: "live:" + o.Root}
	if b, err := os.ReadFile(o.path("etc/hostname")); err == nil {
		h.Hostname = strings.TrimSpace(string(b))
	}
	gatherDriver(ctx, &o, h)
	gatherToolkit(&o, h)
	h.Engines = probeEngines(ctx, &o)
	gatherRuntimeConfig(ctx, &o, h)
	h.Compose = findCompose(ctx, &o)
	h.Registry = readRegistryAuth(ctx, &o)
	for _, v := range o.Volumes {
		h.Volumes = append(h.Volumes, ProbeVolume(v))
	}
	if err := h.complete("live"); err != nil {
		// A GPU whose compute capability nothing could tell: keep the
		// description, say what is unknown.
		h.Notes = append(h.Notes, err.Error())
	}
	return h, nil
}

// run executes a program with a timeout and returns its stdout.
func run(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The timeout (or an interrupt) kills the program's whole process
	// group: a hung driver query's children do not hold its output open.
	cmd := procgroup.Command(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		msg := strings.TrimSpace(errb.String() + " " + out.String())
		if msg != "" {
			err = fmt.Errorf("%v: %s", err, firstLine(msg))
		}
	}
	return out.String(), err
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func gatherDriver(ctx context.Context, o *GatherOptions, h *Host) {
	// The kernel module's own view, which works without nvidia-smi.
	var nvrm string
	var open bool
	if b, err := os.ReadFile(o.path("proc/driver/nvidia/version")); err == nil {
		if v, op, err := parseNVRM(string(b)); err == nil {
			nvrm, open = v, op
		} else {
			h.Notes = append(h.Notes, "/proc/driver/nvidia/version: "+err.Error())
		}
	}
	smi := o.NvidiaSMI
	if smi == "" {
		smi, _ = exec.LookPath("nvidia-smi")
	}
	if smi != "" && smi != "-" {
		if d := smiDriver(ctx, o, smi, h); d != nil {
			d.OpenKernelModule = open
			if nvrm != "" && nvrm != d.Version {
				h.Notes = append(h.Notes, fmt.Sprintf("nvidia-smi reports driver %s but the loaded kernel module is %s (reboot pending after a driver update?)", d.Version, nvrm))
			}
			h.Driver = d
			return
		}
	} else {
		h.Notes = append(h.Notes, "nvidia-smi not found on PATH")
	}
	if nvrm == "" {
		return
	}
	h.Driver = &Driver{Version: nvrm, OpenKernelModule: open, Source: "/proc/driver/nvidia/version"}
	infos, _ := filepath.Glob(o.path("proc/driver/nvidia/gpus/*/information"))
	sort.Strings(infos)
	for _, p := range infos {
		if b, err := os.ReadFile(p); err == nil {
			if g := parseGPUInformation(string(b)); g.Name != "" {
				h.GPUs = append(h.GPUs, g)
			}
		}
	}
}

// smiDriver asks nvidia-smi for the driver, its CUDA version and the GPUs.
func smiDriver(ctx context.Context, o *GatherOptions, smi string, h *Host) *Driver {
	out, err := run(ctx, o.Timeout, smi)
	if err != nil {
		h.Notes = append(h.Notes, fmt.Sprintf("%s: %v", smi, err))
		return nil
	}
	driver, cuda, err := parseSMIHeader(out)
	if err != nil {
		h.Notes = append(h.Notes, err.Error())
		return nil
	}
	d := &Driver{Version: driver, CUDAVersion: cuda, Source: "nvidia-smi"}
	q, err := run(ctx, o.Timeout, smi, "--query-gpu="+smiQuery, "--format="+smiQueryFormat)
	withCC := true
	if err != nil || strings.Contains(q, "not a valid field") {
		// Drivers before 510 do not know compute_cap.
		withCC = false
		q, err = run(ctx, o.Timeout, smi, "--query-gpu="+smiQueryNoCC, "--format="+smiQueryFormat)
	}
	if err != nil {
		h.Notes = append(h.Notes, fmt.Sprintf("%s --query-gpu: %v", smi, err))
		return d
	}
	gpus, _, err := parseSMIQuery(q, withCC)
	if err != nil {
		h.Notes = append(h.Notes, err.Error())
	}
	h.GPUs = gpus
	return d
}

var toolkitBinaries = []string{"nvidia-container-runtime", "nvidia-ctk", "nvidia-container-cli", "nvidia-container-runtime-hook", "nvidia-container-toolkit"}

func gatherToolkit(o *GatherOptions, h *Host) {
	t := &h.Toolkit
	t.Binaries = map[string]string{}
	for _, b := range toolkitBinaries {
		for _, dir := range []string{"usr/bin", "usr/local/bin", "usr/sbin", "bin"} {
			p := o.path(filepath.Join(dir, b))
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				t.Binaries[b] = "/" + filepath.Join(dir, b)
				break
			}
		}
	}
	if p := o.path("etc/nvidia-container-runtime/config.toml"); exists(p) {
		t.ConfigFile = "/etc/nvidia-container-runtime/config.toml"
	}
	if b, err := os.ReadFile(o.path("etc/docker/daemon.json")); err == nil {
		var d struct {
			Runtimes       map[string]json.RawMessage `json:"runtimes"`
			DefaultRuntime string                     `json:"default-runtime"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			h.Notes = append(h.Notes, "/etc/docker/daemon.json: "+err.Error())
		} else {
			t.DockerRuntimes, t.DockerDefaultRuntime = sortedKeys(d.Runtimes), d.DefaultRuntime
		}
	}
	files := []string{o.path("etc/containerd/config.toml")}
	dropins, _ := filepath.Glob(o.path("etc/containerd/conf.d/*.toml"))
	files = append(files, dropins...)
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			for _, r := range containerdRuntimes(string(b)) {
				if !slices.Contains(t.ContainerdRuntimes, r) {
					t.ContainerdRuntimes = append(t.ContainerdRuntimes, r)
				}
			}
		}
	}
	sort.Strings(t.ContainerdRuntimes)
	for _, dir := range []string{"etc/cdi", "var/run/cdi"} {
		specs, _ := filepath.Glob(o.path(filepath.Join(dir, "*")))
		sort.Strings(specs)
		for _, p := range specs {
			if !strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml") && !strings.HasSuffix(p, ".json") {
				continue
			}
			spec, err := readCDISpec(p)
			if err != nil {
				h.Notes = append(h.Notes, fmt.Sprintf("CDI spec /%s/%s: %v", dir, filepath.Base(p), err))
				continue
			}
			spec.Path = "/" + filepath.Join(dir, filepath.Base(p))
			t.CDISpecs = append(t.CDISpecs, spec)
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// tomlHeader matches a TOML table header line.
var tomlHeader = regexp.MustCompile(`^\s*\[([^\[\]]+)\]\s*(?:#.*)?$`)

// containerdRuntimes lists the runtime names of containerd's CRI plugin
// config: tables [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.NAME]
// (config version 2) or [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.NAME]
// (version 3). Only table headers are read; values do not matter here.
func containerdRuntimes(toml string) []string {
	var out []string
	for _, l := range strings.Split(toml, "\n") {
		m := tomlHeader.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		key := strings.NewReplacer(`"`, "", `'`, "", " ", "").Replace(m[1])
		_, rest, ok := strings.Cut(key, ".containerd.runtimes.")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, ".")
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func readCDISpec(p string) (CDISpec, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return CDISpec{}, err
	}
	var s struct {
		Kind    string `yaml:"kind" json:"kind"`
		Devices []struct {
			Name string `yaml:"name" json:"name"`
		} `yaml:"devices" json:"devices"`
	}
	if err := yaml.Unmarshal(b, &s); err != nil { // YAML is a superset of JSON
		return CDISpec{}, err
	}
	if s.Kind == "" {
		return CDISpec{}, fmt.Errorf("no kind")
	}
	spec := CDISpec{Kind: s.Kind, Devices: []string{}}
	for _, d := range s.Devices {
		spec.Devices = append(spec.Devices, d.Name)
	}
	return spec, nil
}

// findCompose looks for the Docker Compose CLI plugin (v2) or the
// standalone docker-compose, and asks it for its version.
func findCompose(ctx context.Context, o *GatherOptions) *Compose {
	cands := []string{
		"usr/libexec/docker/cli-plugins/docker-compose",
		"usr/lib/docker/cli-plugins/docker-compose",
		"usr/local/lib/docker/cli-plugins/docker-compose",
		"usr/local/libexec/docker/cli-plugins/docker-compose",
		"usr/local/bin/docker-compose",
		"usr/bin/docker-compose",
	}
	var paths []string
	for _, c := range cands {
		paths = append(paths, o.path(c))
	}
	if home, err := os.UserHomeDir(); err == nil && o.Root == "/" {
		paths = append(paths, filepath.Join(home, ".docker/cli-plugins/docker-compose"))
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue
		}
		c := &Compose{Path: "/" + strings.TrimPrefix(strings.TrimPrefix(p, o.Root), "/")}
		if out, err := run(ctx, o.Timeout, p, "version", "--short"); err == nil {
			c.Version = strings.TrimSpace(firstLine(out))
		}
		return c
	}
	return nil
}
