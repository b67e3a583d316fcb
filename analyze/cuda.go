package analyze

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/layers"
)

// cudaFacts reads CUDA facts from the image config and what the files
// showed (cuDNN header, cudart file name).
func cudaFacts(img *layers.Image, cudnnFromHeader, cudart string) (CUDAFacts, []string) {
	f := CUDAFacts{}
	var warnings []string
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
		req, err := parseRequirement(f.RequireCUDA)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("config env NVIDIA_REQUIRE_CUDA: %v", err))
		}
		f.Requirement = req
	}
	cudaVer := f.CUDAVersion
	if cudaVer == "" && f.Requirement != nil {
		cudaVer = f.Requirement.CUDA
	}
	if cudaVer == "" && cudart != "" {
		// libcudart.so.11.8.89: the first two numbers are the toolkit.
		p := strings.SplitN(cudart, ".", 3)
		if len(p) >= 2 {
			cudaVer = p[0] + "." + p[1]
		}
	}
	if cudaVer != "" {
		md, err := cuda.MinDriver(cudaVer)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("minimum driver: %v", err))
		} else {
			f.MinDriver = &MinDriver{Toolkit: md.Toolkit, MinorVersionCompat: md.MinorVersionCompat}
		}
	}
	return f, warnings
}

// parseRequirement parses NVIDIA_REQUIRE_CUDA with the compatibility
// database's parser and flattens it for the report. A value that does not
// parse is reported as a warning by the caller, not dropped silently.
func parseRequirement(s string) (*Requirement, error) {
	req, err := cuda.ParseRequireCUDA(s)
	if err != nil {
		return nil, err
	}
	r := &Requirement{CUDA: req.CUDAMin(), Terms: strings.Fields(s), Brands: req.Brands(), DriverBranches: []string{}}
	seen := map[string]bool{}
	for _, b := range r.Brands {
		for _, br := range req.Branches(b) {
			if !seen[br] {
				seen[br] = true
				r.DriverBranches = append(r.DriverBranches, br)
			}
		}
	}
	if r.Brands == nil {
		r.Brands = []string{}
	}
	sort.Strings(r.Brands)
	sort.Strings(r.DriverBranches)
	return r, nil
}
