package builder

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	ocispecs "github.com/opencontainers/image-spec/specs-go/v1"
)

// RequireCUDA is the NVIDIA_REQUIRE_CUDA value matching the plan: the
// nvidia/cuda image's own value when kiln's data has it, else cuda>=X.Y.
func RequireCUDA(p *recipes.Plan) string {
	if req, _, ok := cuda.ImageRequireCUDA(p.CUDA); ok {
		return req.String()
	}
	v := p.CUDA
	if parts := strings.Split(v, "."); len(parts) > 2 {
		v = parts[0] + "." + parts[1]
	}
	return "cuda>=" + v
}

// ImageConfig is the runtime image's config (without rootfs and history,
// which the exporter fills in), merged over the base image's config when
// base is not nil.
func ImageConfig(p *recipes.Plan, in Inputs, platform ocispecs.Platform, base []byte) (ocispecs.Image, error) {
	var img ocispecs.Image
	if len(base) > 0 {
		if err := json.Unmarshal(base, &img); err != nil {
			return img, fmt.Errorf("base image config: %w", err)
		}
	}
	img.Platform = platform
	img.RootFS = ocispecs.RootFS{Type: "layers"}
	if in.SourceDateEpoch != nil {
		t := time.Unix(*in.SourceDateEpoch, 0).UTC()
		img.Created = &t
	}
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range img.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	set("PATH", DefaultPath)
	ld := DefaultLDLibraryPath
	if cur := env["LD_LIBRARY_PATH"]; cur != "" && cur != ld {
		for _, d := range strings.Split(cur, ":") {
			if d != "" && !slices.Contains(strings.Split(ld, ":"), d) {
				ld += ":" + d
			}
		}
	}
	set("LD_LIBRARY_PATH", ld)
	set("NVIDIA_VISIBLE_DEVICES", "all")
	set("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
	set("NVIDIA_REQUIRE_CUDA", RequireCUDA(p))
	if _, ok := env["CUDA_VERSION"]; !ok {
		set("CUDA_VERSION", p.CUDA)
	}
	if p.App != nil {
		keys := make([]string, 0, len(p.App.Env))
		for k := range p.App.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(k, p.App.Env[k])
		}
	}
	img.Config.Env = nil
	for _, k := range order {
		img.Config.Env = append(img.Config.Env, k+"="+env[k])
	}
	if img.Config.Labels == nil {
		img.Config.Labels = map[string]string{}
	}
	lb := img.Config.Labels
	if in.RecipeHash != "" {
		lb[layers.LabelRecipeHash] = in.RecipeHash
	}
	if in.LockDigest != "" {
		lb[layers.LabelLockDigest] = in.LockDigest
	}
	if p.MinDriver.Toolkit != "" {
		lb[layers.LabelMinDriver] = p.MinDriver.Toolkit
	}
	if p.MinDriver.MinorVersionCompat != "" {
		lb[layers.LabelMinDriverMinor] = p.MinDriver.MinorVersionCompat
	}
	lb[layers.LabelCUDAArchs] = strings.Join(p.CUDAArchs, ",")
	lb[layers.LabelCUDA] = p.CUDA
	rec, err := NewRecord(p, in)
	if err != nil {
		return img, err
	}
	rj, err := json.Marshal(rec)
	if err != nil {
		return img, err
	}
	lb[layers.LabelInputs] = string(rj)
	if p.Name != "" {
		lb["org.opencontainers.image.title"] = p.Name
	}
	if p.App != nil {
		if len(p.App.Entrypoint) > 0 {
			img.Config.Entrypoint = slices.Clone(p.App.Entrypoint)
			img.Config.Cmd = nil
		}
		if len(p.App.Cmd) > 0 {
			img.Config.Cmd = slices.Clone(p.App.Cmd)
		}
		if p.App.Workdir != "" {
			img.Config.WorkingDir = p.App.Workdir
		}
		if p.App.User != "" {
			img.Config.User = p.App.User
		}
		for _, port := range p.App.Ports {
			if img.Config.ExposedPorts == nil {
				img.Config.ExposedPorts = map[string]struct{}{}
			}
			img.Config.ExposedPorts[fmt.Sprintf("%d/tcp", port)] = struct{}{}
		}
	}
	return img, nil
}
