package hostcheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

// complete fills what a description may leave out from the compatibility
// database: the driver's CUDA version, each GPU's model, compute
// capability, brand and data-center flag. source names where the given
// values came from.
func (h *Host) complete(source string) error {
	if h.SchemaVersion == 0 {
		h.SchemaVersion = HostSchemaVersion
	}
	if h.Driver != nil {
		if _, err := cuda.ParseVersion(h.Driver.Version); err != nil {
			return fmt.Errorf("driver.version %q: %v", h.Driver.Version, err)
		}
		if h.Driver.CUDAVersion == "" {
			c, err := cuda.DriverCUDA(h.Driver.Version)
			if err != nil {
				return fmt.Errorf("driver.version: %v", err)
			}
			h.Driver.CUDAVersion = c
		}
		if h.Driver.Source == "" {
			h.Driver.Source = source
		}
	}
	for i := range h.GPUs {
		if err := h.GPUs[i].complete(source); err != nil {
			return fmt.Errorf("gpus[%d]: %v", i, err)
		}
	}
	if h.GPUs == nil {
		h.GPUs = []GPU{}
	}
	if h.Engines == nil {
		h.Engines = []Engine{}
	}
	if h.Volumes == nil {
		h.Volumes = []Volume{}
	}
	if h.Notes == nil {
		h.Notes = []string{}
	}
	if h.Registry.Registries == nil {
		h.Registry.Registries = []string{}
	}
	t := &h.Toolkit
	if t.Binaries == nil {
		t.Binaries = map[string]string{}
	}
	if t.DockerRuntimes == nil {
		t.DockerRuntimes = []string{}
	}
	if t.ContainerdRuntimes == nil {
		t.ContainerdRuntimes = []string{}
	}
	if t.CDISpecs == nil {
		t.CDISpecs = []CDISpec{}
	}
	return nil
}

func (g *GPU) complete(source string) error {
	info, ok := lookupGPU(g.Name)
	if ok {
		g.Model = info.Name
		if g.ComputeCapability == "" {
			g.ComputeCapability = info.ComputeCapability
		}
	}
	if g.ComputeCapability == "" {
		return fmt.Errorf("%q: compute capability unknown (nvidia-smi too old for compute_cap and the GPU is not in kiln's table); set compute_capability", g.Name)
	}
	if _, err := cuda.ParseVersion(g.ComputeCapability); err != nil {
		return fmt.Errorf("compute_capability %q: %v", g.ComputeCapability, err)
	}
	switch {
	case g.Brand != "":
		if g.BrandSource == "" {
			g.BrandSource = source
		}
	case ok && info.Brand != "":
		g.Brand, g.BrandSource = info.Brand, fmt.Sprintf("kiln GPU table (%s, confidence %s)", info.Name, info.BrandConfidence)
	default:
		g.Brand, g.BrandSource = brandFromName(g.Name), "guessed from the GPU name"
	}
	g.Brand = strings.ToLower(g.Brand)
	g.DataCenter = cuda.DataCenterBrand(g.Brand)
	return nil
}

// lookupGPU finds a GPU in the compatibility database by the product name
// nvidia-smi prints ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
// "NVIDIA GeForce RTX 4090"): the longest leading run of words that names a
// known GPU.
func lookupGPU(name string) (cuda.GPUInfo, bool) {
	words := strings.FieldsFunc(name, func(r rune) bool { return r == ' ' || r == '-' || r == '_' })
	for n := len(words); n > 0; n-- {
		q := strings.Join(words[:n], " ")
		if strings.EqualFold(q, "nvidia") || strings.EqualFold(q, "tesla") || strings.EqualFold(q, "nvidia geforce") {
			break
		}
		if g, err := cuda.GPU(q); err == nil && !strings.HasPrefix(g.Name, "sm_") {
			return g, true
		}
	}
	return cuda.GPUInfo{}, false
}

// brandFromName guesses the NVML brand of a GPU kiln does not know from its
// product name.
func brandFromName(name string) string {
	n := strings.ToLower(name)
	rtx := strings.Contains(n, "rtx")
	pick := func(base string) string {
		if rtx {
			return base + "rtx"
		}
		return base
	}
	switch {
	case strings.Contains(n, "geforce"):
		return pick("geforce")
	case strings.Contains(n, "titan"):
		return pick("titan")
	case strings.Contains(n, "quadro"):
		return pick("quadro")
	case strings.Contains(n, "tesla"):
		return "tesla"
	case rtx:
		return "nvidiartx"
	}
	return "nvidia"
}

// ccSM renders "9.0" as "sm_90".
func ccSM(cc string) string { return "sm_" + strings.Replace(cc, ".", "", 1) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
