package analyze

import (
	"sort"
	"strings"

	"github.com/kiln-build/kiln/layers"
)

// cudaFacts reads CUDA facts from the image config and what the files
// showed (cuDNN header, cudart file name).
func cudaFacts(img *layers.Image, cudnnFromHeader, cudart string) CUDAFacts {
	f := CUDAFacts{}
	env := map[string]string{}
	labels := map[string]string{}
	if img.Config != nil {
		for _, kv := range img.Config.Config.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		labels = img.Config.Config.Labels
	}
	f.CUDAVersion = env["CUDA_VERSION"]
	f.RequireCUDA = env["NVIDIA_REQUIRE_CUDA"]
	f.VisibleDevices = env["NVIDIA_VISIBLE_DEVICES"]
	f.DriverCapabilities = env["NVIDIA_DRIVER_CAPABILITIES"]
	switch strings.ToLower(env["NVIDIA_DISABLE_REQUIRE"]) {
	case "1", "true", "yes":
		f.DisableRequire = true
	}
	switch {
	case env["NV_CUDNN_VERSION"] != "":
		f.CuDNNVersion, f.CuDNNSource = env["NV_CUDNN_VERSION"], "env NV_CUDNN_VERSION"
	case labels["com.nvidia.cudnn.version"] != "":
		f.CuDNNVersion, f.CuDNNSource = labels["com.nvidia.cudnn.version"], "label com.nvidia.cudnn.version"
	case cudnnFromHeader != "":
		f.CuDNNVersion, f.CuDNNSource = cudnnFromHeader, "cudnn_version.h"
	}
	if cudart != "" {
		f.RuntimeVersion = cudart
	}
	if f.RequireCUDA != "" {
		f.Requirement = parseRequirement(f.RequireCUDA)
	}
	cuda := f.CUDAVersion
	if cuda == "" && f.Requirement != nil {
		cuda = f.Requirement.CUDA
	}
	if cuda == "" && cudart != "" {
		// libcudart.so.11.8.89: the first two numbers are the toolkit.
		p := strings.SplitN(cudart, ".", 3)
		if len(p) >= 2 {
			cuda = p[0] + "." + p[1]
		}
	}
	if cuda != "" {
		if md, err := MinDriverFor(cuda); err == nil {
			f.MinDriver = md
		}
	}
	return f
}

// parseRequirement splits NVIDIA_REQUIRE_CUDA into its OR-terms and pulls
// out the cuda>= floor, brands and driver branches.
func parseRequirement(s string) *Requirement {
	r := &Requirement{Terms: []string{}, Brands: []string{}, DriverBranches: []string{}}
	brands := map[string]bool{}
	branches := map[string]bool{}
	for _, term := range strings.Fields(s) {
		r.Terms = append(r.Terms, term)
		for _, rule := range strings.Split(term, ",") {
			switch {
			case strings.HasPrefix(rule, "cuda>="):
				if r.CUDA == "" {
					r.CUDA = strings.TrimPrefix(rule, "cuda>=")
				}
			case strings.HasPrefix(rule, "brand="):
				brands[strings.TrimPrefix(rule, "brand=")] = true
			case strings.HasPrefix(rule, "driver>="):
				branches[strings.TrimPrefix(rule, "driver>=")] = true
			}
		}
	}
	for b := range brands {
		r.Brands = append(r.Brands, b)
	}
	for b := range branches {
		r.DriverBranches = append(r.DriverBranches, b)
	}
	sort.Strings(r.Brands)
	sort.Strings(r.DriverBranches)
	return r
}
