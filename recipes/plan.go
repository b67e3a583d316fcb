package recipes

import (
	"strings"
)

// Plan is a resolved recipe: exact versions and everything the builder needs.
// Its JSON keys are stable.
type Plan struct {
	Name        string  `json:"name"`
	CUDA        string  `json:"cuda"`
	CuDNN       *string `json:"cudnn"`
	CuDNNSource string  `json:"cudnn_source"` // image, torch-wheel, none
	OS          string  `json:"os"`
	Python      string  `json:"python"`
	// PythonSource is where the image's Python comes from: PythonOS (the
	// base OS's python3, through apt) or PythonStandalone (PythonDist).
	// Either way python, python3 and pip run it in both stages.
	PythonSource     string      `json:"python_source"`
	PythonDist       *PythonDist `json:"python_dist,omitempty"`
	Torch            *string     `json:"torch"`
	TorchCUDAVariant *string     `json:"torch_cuda_variant"`
	Torchvision      *string     `json:"torchvision"`
	Torchaudio       *string     `json:"torchaudio"`
	TorchIndexURL    string      `json:"torch_index_url,omitempty"`
	TorchCXX11ABI    *bool       `json:"torch_cxx11_abi"`
	FlashAttn        *string     `json:"flash_attn"`
	FlashAttnWheel   *string     `json:"flash_attn_wheel"`
	FlashAttnURL     *string     `json:"flash_attn_wheel_url"`
	FlashAttnBuild   *FABuild    `json:"flash_attn_build"`
	BitsAndBytes     *string     `json:"bitsandbytes"`
	BitsAndBytesLib  *string     `json:"bitsandbytes_cuda_lib"`
	BaseImages       BaseImages  `json:"base_images"`
	// RuntimeFlavor is the runtime base's nvidia/cuda flavour: "base" when
	// the torch wheels bring the CUDA libraries (never ship CUDA twice),
	// else "runtime".
	RuntimeFlavor string    `json:"runtime_flavor"`
	CUDAArchs     []string  `json:"cuda_archs"`
	GPUs          []PlanGPU `json:"gpus"`
	// GPUCode is the fat-binary pruning kiln build applies; nil keeps every
	// library's GPU code.
	GPUCode        *PlanGPUCode  `json:"gpu_code"`
	MinDriver      PlanMinDriver `json:"min_driver"`
	Platforms      []string      `json:"platforms"`
	RegistryMirror string        `json:"registry_mirror,omitempty"`
	WheelIndexes   []string      `json:"wheel_indexes"`
	Apt            []string      `json:"apt"`
	Pip            []PipPackage  `json:"pip"`
	App            *AppSpec      `json:"app"`
	Weights        []Weight      `json:"weights"`
	Test           []string      `json:"test"`
	Warnings       []string      `json:"warnings"`
	Sources        []FactSource  `json:"sources"`
	DataVersion    string        `json:"data_version"`
	// Data says which compatibility data the plan used and how old it is;
	// set only when the caller asks (WithDataAge), so that a lock does not
	// change with the calendar.
	Data *PlanData `json:"data,omitempty"`
}

// PlanData is the compatibility data a plan was resolved with.
type PlanData struct {
	Version string `json:"version"`
	// Origin is "embedded" or the refreshed data file's path.
	Origin string `json:"origin"`
	// Date is when the torch, torchvision/torchaudio and nvidia/cuda facts
	// were last checked against their sources (YYYY-MM-DD).
	Date       string `json:"date"`
	AgeDays    int    `json:"age_days"`
	MaxAgeDays int    `json:"max_age_days"`
	// Stale is AgeDays > MaxAgeDays: a warning says so too.
	Stale bool `json:"stale"`
}

// BaseImages are the nvidia/cuda images the build starts from.
type BaseImages struct {
	Devel   string `json:"devel"`
	Runtime string `json:"runtime"`
}

// PlanMinDriver is the minimum host driver for the image.
type PlanMinDriver struct {
	Toolkit            string `json:"toolkit"`
	MinorVersionCompat string `json:"minor_version_compat"`
}

// PlanGPU is a target GPU.
type PlanGPU struct {
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability"`
}

// PlanGPUCode is what kiln build keeps of the installed libraries' GPU
// code: for each architecture in Archs (sm_90) its native cubin, and with
// KeepPTX each fat binary's newest PTX; NVIDIA's libraries only with
// NVIDIALibs.
type PlanGPUCode struct {
	Archs      []string `json:"archs"`
	KeepPTX    bool     `json:"keep_ptx"`
	NVIDIALibs bool     `json:"nvidia_libs"`
}

// FABuild holds the settings for building FlashAttention from source.
type FABuild struct {
	Reason      string            `json:"reason"`
	CUDAArchs   string            `json:"flash_attn_cuda_archs"`
	MaxJobs     int               `json:"max_jobs"`
	NvccThreads int               `json:"nvcc_threads"`
	MemoryGB    int               `json:"sized_for_memory_gb"`
	CPUs        int               `json:"sized_for_cpus"`
	Env         map[string]string `json:"env"`
	PipFlags    []string          `json:"pip_flags"`
}

// PipPackage is one pip requirement, in install order.
type PipPackage struct {
	Name        string `json:"name"`
	Requirement string `json:"requirement"`
	IndexURL    string `json:"index_url,omitempty"`
	URL         string `json:"url,omitempty"`
	Wheel       string `json:"wheel,omitempty"`
	NoBuildIso  bool   `json:"no_build_isolation,omitempty"`
	// Build is "source" for a requirement kiln compiles from its source
	// archive (the recipe's pip_from_source; FlashAttention's build:
	// source is FlashAttnBuild); empty for a wheel from the index.
	Build string `json:"build,omitempty"`
}

// FromSource says whether kiln compiles pp from its source archive.
func (pp PipPackage) FromSource() bool { return pp.Build == BuildSource }

// Version is the version pp pins with ==, if it does.
func (pp PipPackage) Version() (string, bool) {
	_, v, ok := pinned(pp.Requirement)
	return v, ok
}

// BuildSource is PipPackage.Build for a requirement compiled from source.
const BuildSource = "source"

// Compiled are the pip requirements a build compiles into wheels, in
// install order: FlashAttention with build: source, and the recipe's
// pip_from_source requirements.
func (p *Plan) Compiled() []PipPackage {
	var out []PipPackage
	for _, pp := range p.Pip {
		if pp.FromSource() || pp.Name == "flash-attn" && p.FlashAttnBuild != nil {
			out = append(out, pp)
		}
	}
	return out
}

// StackPins are the plan's optional stack versions that are set, as
// (name, value) pairs in a fixed order: cudnn, torch, torch-cuda-variant,
// flash-attn, bitsandbytes, then cuda-archs (comma-separated). The SBOM's
// plan properties and the provenance's parameters are made from them.
func (p *Plan) StackPins() [][2]string {
	var out [][2]string
	for _, kv := range []struct {
		k string
		v *string
	}{{"cudnn", p.CuDNN}, {"torch", p.Torch}, {"torch-cuda-variant", p.TorchCUDAVariant}, {"flash-attn", p.FlashAttn}, {"bitsandbytes", p.BitsAndBytes}} {
		if kv.v != nil && *kv.v != "" {
			out = append(out, [2]string{kv.k, *kv.v})
		}
	}
	if len(p.CUDAArchs) > 0 {
		out = append(out, [2]string{"cuda-archs", strings.Join(p.CUDAArchs, ",")})
	}
	return out
}
