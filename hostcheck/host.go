package hostcheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// HostSchemaVersion is bumped on any incompatible change to the captured
// host description; fields are only added within a version.
const HostSchemaVersion = 1

// Host describes a GPU host: what the checks need, nothing secret.
type Host struct {
	SchemaVersion int `json:"schema_version"`
	// Source says where the description came from: "live:/" (gathered on
	// the host under that root) or "file:host.json".
	Source   string `json:"source"`
	Hostname string `json:"hostname,omitempty"`
	// Driver is nil when no NVIDIA driver was found.
	Driver   *Driver  `json:"driver"`
	GPUs     []GPU    `json:"gpus"`
	Toolkit  Toolkit  `json:"toolkit"`
	Engines  []Engine `json:"engines"`
	Compose  *Compose `json:"compose"`
	Registry Registry `json:"registry_auth"`
	Volumes  []Volume `json:"volumes"`
	// ContainerdConfig and DockerConfig are the runtimes' pull settings
	// (the runtime-settings item); nil when that runtime is neither
	// configured nor reachable here.
	ContainerdConfig *ContainerdConfig   `json:"containerd_config,omitempty"`
	DockerConfig     *DockerDaemonConfig `json:"docker_daemon_config,omitempty"`
	Notes            []string            `json:"notes"`
}

// Driver is the host's NVIDIA kernel driver.
type Driver struct {
	Version string `json:"version"` // NVRM version, e.g. 550.54.15
	// CUDAVersion is the newest CUDA the driver supports natively, as
	// nvidia-smi prints it ("CUDA Version: 12.4"), or derived from the
	// driver table when nvidia-smi is absent.
	CUDAVersion string `json:"cuda_version"`
	// OpenKernelModule is true for NVIDIA's open GPU kernel modules.
	OpenKernelModule bool   `json:"open_kernel_module,omitempty"`
	Source           string `json:"source"` // nvidia-smi, /proc/driver/nvidia/version, host description
}

// GPU is one GPU on the host.
type GPU struct {
	Index             int    `json:"index"`
	Name              string `json:"name"` // as nvidia-smi prints it, e.g. "NVIDIA H100 80GB HBM3"
	UUID              string `json:"uuid,omitempty"`
	ComputeCapability string `json:"compute_capability"` // 9.0
	// Brand is the NVML brand as NVIDIA_REQUIRE_CUDA's brand clauses spell
	// it (tesla, nvidia, geforcertx, ...).
	Brand string `json:"brand"`
	// DataCenter is true for GPUs where forward compatibility (cuda-compat)
	// works: data-center GPUs, select RTX server SKUs, Jetson.
	DataCenter bool  `json:"data_center"`
	MemoryMiB  int64 `json:"memory_mib,omitempty"`
	// Model is the compatibility database's name for the GPU ("" when
	// unknown to kiln); BrandSource says where brand and compute
	// capability came from.
	Model       string `json:"model,omitempty"`
	BrandSource string `json:"brand_source,omitempty"`
}

// Toolkit is the NVIDIA Container Toolkit as installed on the host.
type Toolkit struct {
	// Binaries found: nvidia-container-runtime, nvidia-ctk,
	// nvidia-container-cli, nvidia-container-runtime-hook (path each).
	Binaries map[string]string `json:"binaries"`
	// ConfigFile is /etc/nvidia-container-runtime/config.toml when present.
	ConfigFile string `json:"config_file,omitempty"`
	// DockerRuntimes are the runtimes named in /etc/docker/daemon.json;
	// DockerDefaultRuntime its default-runtime.
	DockerRuntimes       []string `json:"docker_runtimes"`
	DockerDefaultRuntime string   `json:"docker_default_runtime,omitempty"`
	// ContainerdRuntimes are the CRI runtimes named in
	// /etc/containerd/config.toml (and its drop-ins).
	ContainerdRuntimes []string `json:"containerd_runtimes"`
	// CDISpecs are CDI spec files under /etc/cdi and /var/run/cdi, with the
	// device kinds they declare (nvidia.com/gpu).
	CDISpecs []CDISpec `json:"cdi_specs"`
}

// CDISpec is one Container Device Interface spec file.
type CDISpec struct {
	Path    string   `json:"path"`
	Kind    string   `json:"kind"`
	Devices []string `json:"devices"`
}

// Engine is a container engine reachable (or not) over its socket.
type Engine struct {
	Kind      string `json:"kind"` // docker, containerd, buildkit
	Socket    string `json:"socket"`
	Reachable bool   `json:"reachable"`
	Version   string `json:"version,omitempty"`
	Rootless  bool   `json:"rootless,omitempty"`
	// Runtimes are the OCI runtimes the engine reports (docker /info).
	Runtimes       []string `json:"runtimes,omitempty"`
	DefaultRuntime string   `json:"default_runtime,omitempty"`
	// CanBuild says whether images can be built through this engine
	// (dockerd has a builder; containerd alone only runs images).
	CanBuild bool `json:"can_build"`
	// DataRoot is where the engine keeps images (docker /info
	// DockerRootDir) and its free space, for the image's size.
	// containerd: the content store's root (introspection, plugin
	// io.containerd.content.v1.content).
	DataRoot          string `json:"data_root,omitempty"`
	DataRootFreeBytes int64  `json:"data_root_free_bytes,omitempty"`
	// StorageDriver is dockerd's graph driver (/info Driver: overlay2,
	// vfs, or a containerd snapshotter).
	StorageDriver string `json:"storage_driver,omitempty"`
	// SnapshotRoot is containerd's root for the snapshotter its CRI
	// config names (introspection exports), where layers are unpacked.
	SnapshotRoot          string `json:"snapshot_root,omitempty"`
	SnapshotRootFreeBytes int64  `json:"snapshot_root_free_bytes,omitempty"`
	// Erofs is containerd's EROFS snapshotter, when it lists one.
	Erofs *Erofs `json:"erofs,omitempty"`
	Error string `json:"error,omitempty"`

	snapRoots map[string]string // snapshotter id → root, from introspection
}

// Compose is Docker Compose when installed.
type Compose struct {
	Path    string `json:"path"`
	Version string `json:"version,omitempty"`
}

// Registry says which registries have credentials configured. Only host
// names are kept: never a user name, password or token.
type Registry struct {
	ConfigFile  string   `json:"config_file,omitempty"`
	Registries  []string `json:"registries"`             // auths entries and credHelpers keys
	CredsStore  string   `json:"creds_store,omitempty"`  // a helper that may hold any registry
	CredHelpers []string `json:"cred_helpers,omitempty"` // helper names in use
	// HelperErrors are the registries whose credential helper failed or
	// did not answer in time, with the error (the helper and its exit
	// status, never its output).
	HelperErrors map[string]string `json:"helper_errors,omitempty"`
}

// Volume is a directory meant for persistent data (weights, caches).
type Volume struct {
	Path       string `json:"path"`
	Exists     bool   `json:"exists"`
	Writable   bool   `json:"writable"`
	FSType     string `json:"fs_type,omitempty"`
	FreeBytes  int64  `json:"free_bytes"`
	TotalBytes int64  `json:"total_bytes"`
	Error      string `json:"error,omitempty"`
}

// LoadHost reads a captured host description (kiln host check --capture).
// Unknown schema versions and missing required fields are errors naming
// the file and the field.
func LoadHost(path string) (*Host, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseHost(path, b)
}

// ParseHost parses a host description; name is used in errors.
func ParseHost(name string, b []byte) (*Host, error) {
	var h Host
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: not a host description: %v", name, err)
	}
	if h.SchemaVersion != HostSchemaVersion {
		return nil, fmt.Errorf("%s: schema_version %d, kiln reads %d", name, h.SchemaVersion, HostSchemaVersion)
	}
	for i, g := range h.GPUs {
		if g.Name == "" && g.ComputeCapability == "" {
			return nil, fmt.Errorf("%s: gpus[%d]: needs name or compute_capability", name, i)
		}
	}
	if h.Driver != nil && h.Driver.Version == "" {
		return nil, fmt.Errorf("%s: driver.version: required when driver is set", name)
	}
	h.Source = "file:" + filepath.Base(name)
	if err := h.complete("host description"); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &h, nil
}

// Marshal renders the description as indented JSON (the --capture format).
func (h *Host) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
