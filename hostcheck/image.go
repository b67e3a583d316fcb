package hostcheck

import (
	"context"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

// Label keys kiln writes into the images it builds.
const (
	labelCUDA      = layers.LabelCUDA
	labelCUDAArchs = layers.LabelCUDAArchs
)

// Image is what the checks need to know about the image to run.
type Image struct {
	Ref string `json:"ref"`
	// Source: "image" (config and layers read) or "lock" (a kiln lock
	// file: the recipe's facts, nothing pulled).
	Source string `json:"source"`
	// Registry is the registry host the image is pulled from ("" for
	// local layouts, archives and locks).
	Registry string `json:"registry,omitempty"`
	Digest   string `json:"digest,omitempty"`
	// CUDA is the image's CUDA version (CUDA_VERSION, dev.kiln.cuda, the
	// lock's plan).
	CUDA string `json:"cuda,omitempty"`
	// RequireCUDA is NVIDIA_REQUIRE_CUDA as the container runtime will see
	// it; RequireSource says where it came from.
	RequireCUDA    string `json:"nvidia_require_cuda,omitempty"`
	RequireSource  string `json:"nvidia_require_cuda_source,omitempty"`
	DisableRequire bool   `json:"disable_require"`
	// DeclaredArchs are the compute capabilities the recipe targeted
	// (label dev.kiln.cuda-archs or the lock's plan).
	DeclaredArchs []string `json:"declared_archs"`
	// Kernels summarises the fat binaries found by the layer scan; nil when
	// the layers were not scanned (--no-kernels, a lock).
	Kernels          *KernelSummary `json:"kernels"`
	CompressedSize   int64          `json:"compressed_size,omitempty"`
	UncompressedSize int64          `json:"uncompressed_size,omitempty"`
	// LayerCompression lists the encodings of the image's layers (gzip,
	// zstd, none), from their media types; empty when not known (a
	// lock).
	LayerCompression []string `json:"layer_compression,omitempty"`
	// Layers is the number of layers (0 when not known: a lock), which
	// the runtimes' concurrent-download limits are compared with.
	Layers int `json:"layers,omitempty"`
	// CompatLibs are the cuda-compat libraries in the image
	// (/usr/local/cuda*/compat/libcuda.so*), which forward compatibility
	// loads; CompatScanned says the layers were read for them (false: a
	// lock, or --no-kernels).
	CompatLibs    []string `json:"compat_libs,omitempty"`
	CompatScanned bool     `json:"compat_scanned"`
	// TorchCUDAVariant is the lock's torch wheel variant (cu128, cu130):
	// the wheels bring their own CUDA runtime, which the driver must run
	// whatever the base image's CUDA.
	Torch            string `json:"torch,omitempty"`
	TorchCUDAVariant string `json:"torch_cuda_variant,omitempty"`

	report *analyze.KernelReport
}

// KernelSummary is the image's device code: architectures and how many
// libraries carry device code.
type KernelSummary struct {
	SM        []string `json:"sm"`
	PTX       []string `json:"ptx"`
	Libraries int      `json:"libraries"`
}

// ImageFromConfig reads an image config: CUDA_VERSION,
// NVIDIA_REQUIRE_CUDA, NVIDIA_DISABLE_REQUIRE and kiln's labels.
func ImageFromConfig(ref, registry string, cfg *v1.ConfigFile) *Image {
	im := &Image{Ref: ref, Source: "image", Registry: registry, DeclaredArchs: []string{}}
	if cfg == nil {
		return im
	}
	env := map[string]string{}
	for _, kv := range cfg.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	labels := cfg.Config.Labels
	im.CUDA = env["CUDA_VERSION"]
	if im.CUDA == "" {
		im.CUDA = labels[labelCUDA]
	}
	if r, ok := env["NVIDIA_REQUIRE_CUDA"]; ok {
		im.RequireCUDA, im.RequireSource = r, "image env NVIDIA_REQUIRE_CUDA"
	} else if im.CUDA != "" {
		// The NVIDIA container toolkit requires cuda>=MAJOR.MINOR of
		// CUDA_VERSION when NVIDIA_REQUIRE_CUDA is unset.
		if v, err := cuda.ParseVersion(im.CUDA); err == nil {
			im.RequireCUDA, im.RequireSource = "cuda>="+v.MajorMinor(), "derived from CUDA_VERSION (the toolkit's rule when NVIDIA_REQUIRE_CUDA is unset)"
		}
	}
	switch strings.ToLower(env["NVIDIA_DISABLE_REQUIRE"]) {
	case "1", "true", "yes":
		im.DisableRequire = true
	}
	if a := labels[labelCUDAArchs]; a != "" {
		for _, cc := range strings.Split(a, ",") {
			if cc = strings.TrimSpace(cc); cc != "" {
				im.DeclaredArchs = append(im.DeclaredArchs, cc)
			}
		}
	}
	return im
}

// AddReport attaches what analyzing the layers found: sizes and the fat
// binary inventory.
func (im *Image) AddReport(r *analyze.Report) {
	im.Digest = r.Digest
	im.CompressedSize, im.UncompressedSize = r.CompressedSize, r.UncompressedSize
	if im.CUDA == "" && r.CUDA.CUDAVersion != "" {
		im.CUDA = r.CUDA.CUDAVersion
	}
	im.CompatLibs, im.CompatScanned = r.CUDA.CompatLibs, true
	if k := r.Kernels; k != nil {
		im.report = k
		im.Kernels = &KernelSummary{SM: k.SM, PTX: k.PTX, Libraries: len(k.Libraries)}
	}
}

// ImageFromLock reads a kiln lock: the recipe's CUDA, the
// NVIDIA_REQUIRE_CUDA kiln builds write and the target architectures.
func ImageFromLock(path string, l *recipes.Lock) *Image {
	im := &Image{Ref: path, Source: "lock", DeclaredArchs: []string{}}
	p := l.Plan
	if p == nil {
		return im
	}
	im.CUDA = p.CUDA
	if req, _, ok := cuda.ImageRequireCUDA(p.CUDA); ok {
		im.RequireCUDA, im.RequireSource = req.String(), "the nvidia/cuda base image's value (kiln's data), which kiln builds keep"
	} else if v, err := cuda.ParseVersion(p.CUDA); err == nil {
		im.RequireCUDA, im.RequireSource = "cuda>="+v.MajorMinor(), "cuda>= of the recipe's CUDA"
	}
	im.DeclaredArchs = append(im.DeclaredArchs, p.CUDAArchs...)
	if p.Torch != nil && p.TorchCUDAVariant != nil {
		im.Torch, im.TorchCUDAVariant = *p.Torch, *p.TorchCUDAVariant
	}
	return im
}

// FromLayers describes an opened image: its config, and, when scan is
// set, the layers streamed through analyze for sizes and fat binaries.
func FromLayers(ctx context.Context, img *layers.Image, scan bool, o analyze.Options) (*Image, error) {
	reg := ""
	if img.Ref.Kind == layers.KindRegistry && img.Ref.Name != nil {
		reg = img.Ref.Name.Context().RegistryStr()
	}
	im := ImageFromConfig(img.Ref.Raw, reg, img.Config)
	im.Digest = img.Digest.String()
	im.CompressedSize = img.CompressedSize()
	im.Layers = len(img.Layers)
	for _, l := range img.Layers {
		c := "gzip"
		switch mt := string(l.MediaType); {
		case strings.Contains(mt, "zstd"):
			c = "zstd"
		case !strings.Contains(mt, "gzip"):
			c = "none"
		}
		if !slices.Contains(im.LayerCompression, c) {
			im.LayerCompression = append(im.LayerCompression, c)
		}
	}
	if !scan {
		return im, nil
	}
	o.Kernels = true
	rep, err := analyze.Image(ctx, img, o)
	if err != nil {
		return nil, err
	}
	im.AddReport(rep)
	return im, nil
}
