package recipes

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

// The resolver's cuDNN and image steps: the NVIDIA base images (devel,
// runtime) for the CUDA, cuDNN and OS chosen, and the wheel indexes.

func (s *resolver) cudnnStep() error {
	r := s.r
	tag := s.imageTag(s.plan.CUDA)
	mode := r.CuDNN
	if mode == "" {
		mode = "auto"
	}
	switch mode {
	case "auto":
		if s.tvar != nil {
			s.plan.CuDNNSource = "torch-wheel"
			if s.tvar.CuDNN != "" {
				s.plan.CuDNN = strp(s.tvar.CuDNN)
				s.fact(fmt.Sprintf("torch %s+%s bundles cuDNN %s (pip nvidia-cudnn-*)", s.torch.Minor, s.tvar.Name, s.tvar.CuDNN), s.torch.Source, s.torch.Confidence)
			} else {
				s.warn("kiln does not know which cuDNN torch %s+%s bundles (pip nvidia-cudnn-*)", s.torch.Minor, s.tvar.Name)
			}
		} else if tag != nil && tag.CuDNNToken != "" {
			s.plan.CuDNN, s.plan.CuDNNSource = strp(s.tagCuDNN(tag)), "image"
		} else {
			s.plan.CuDNNSource = "none"
			s.warn("no cuDNN: kiln has no cuDNN data for nvidia/cuda:%s", s.plan.CUDA)
		}
	case "none":
		if s.tvar != nil {
			s.plan.CuDNNSource = "torch-wheel"
			if s.tvar.CuDNN != "" {
				s.plan.CuDNN = strp(s.tvar.CuDNN)
			}
		} else {
			s.plan.CuDNNSource = "none"
		}
	case "8", "9":
		if tag == nil || tag.CuDNNToken == "" {
			return refuse("cudnn", []string{"cudnn: auto"}, "kiln has no cuDNN data for nvidia/cuda:%s", s.plan.CUDA)
		}
		if tagCuDNNMajor(tag) != mode {
			var alts []string
			var last string
			for _, t := range s.db.Images.Tags {
				if t.CuDNNToken != "" && tagCuDNNMajor(&t) == mode {
					last = t.CUDA
				}
			}
			if last != "" {
				alts = append(alts, fmt.Sprintf("cuda: %q (the newest image with cuDNN %s)", last, mode))
			}
			alts = append(alts, fmt.Sprintf("cudnn: %q", tagCuDNNMajor(tag)))
			return refuse("cudnn", alts, "nvidia/cuda:%s images ship cuDNN %s, not cuDNN %s", s.plan.CUDA, s.tagCuDNN(tag), mode)
		}
		s.plan.CuDNN, s.plan.CuDNNSource = strp(s.tagCuDNN(tag)), "image"
		if s.tvar != nil && tag.CuDNN != "" && s.tvar.CuDNN != tag.CuDNN {
			s.warn("the image's cuDNN %s differs from the cuDNN %s that torch %s+%s bundles; torch uses its own", tag.CuDNN, s.tvar.CuDNN, s.tver, s.tvar.Name)
		}
	}
	if s.plan.CuDNNSource == "image" && tag != nil {
		s.fact(fmt.Sprintf("nvidia/cuda:%s ships cuDNN %s (%s-)", tag.CUDA, s.tagCuDNN(tag), tag.CuDNNToken), tag.Source, tag.Confidence)
	}
	return nil
}

// tagCuDNNMajor is the cuDNN major of a tag's cuDNN variant: from the
// version when known, else from the tag's infix (cudnn8 → 8; cudnn9 and,
// from 12.4.1 on, plain cudnn → 9).
func tagCuDNNMajor(t *ImageTag) string {
	if t.CuDNN != "" {
		return strings.SplitN(t.CuDNN, ".", 2)[0]
	}
	switch t.CuDNNToken {
	case "cudnn8":
		return "8"
	case "cudnn9", "cudnn":
		return "9"
	}
	return ""
}

// tagCuDNN is the cuDNN a tag ships: the exact version when kiln has read
// it, else only its major, with a warning.
func (s *resolver) tagCuDNN(t *ImageTag) string {
	if t.CuDNN != "" {
		return t.CuDNN
	}
	m := tagCuDNNMajor(t)
	msg := fmt.Sprintf("kiln does not know the exact cuDNN of nvidia/cuda:%s-%s-* images (cuDNN %s by the tag); kiln analyze reads it from the image", t.CUDA, t.CuDNNToken, m)
	if !slices.Contains(s.plan.Warnings, msg) {
		s.warn("%s", msg)
	}
	return m
}

func (s *resolver) osName() string {
	if s.r.OS != "" {
		return s.r.OS
	}
	if cuda.MustVersion(s.plan.CUDA).Major() >= 13 {
		return "ubuntu24.04"
	}
	return DefaultOS
}

func (s *resolver) imagesStep() error {
	r := s.r
	osName := s.osName()
	s.plan.OS = osName
	of := s.osFlavor(osName)
	if of == nil {
		return refuse("os", nil, "unknown OS flavour %q", osName)
	}
	if of.FirstCUDA != "" && cuda.CompareVersions(s.plan.CUDA, of.FirstCUDA) < 0 {
		return refuse("os", []string{"os: ubuntu22.04", fmt.Sprintf("cuda: %q or newer", of.FirstCUDA)}, "nvidia/cuda publishes %s images from CUDA %s on, not for %s", osName, of.FirstCUDA, s.plan.CUDA)
	}
	if of.LastCUDA != "" && cuda.CompareVersions(cuda.MajorMinor(s.plan.CUDA), of.LastCUDA) > 0 {
		return refuse("os", []string{"os: ubuntu24.04", fmt.Sprintf("cuda: %q or older", of.LastCUDA)}, "nvidia/cuda has no %s images for CUDA %s (last: %s)", osName, s.plan.CUDA, of.LastCUDA)
	}
	if of.Unofficial {
		s.warn("%s is not an nvidia/cuda flavour kiln has data for; the base images must exist in your registry or mirror", osName)
	}
	s.fact(fmt.Sprintf("nvidia/cuda OS flavour %s", osName), of.Source, of.Confidence)
	tok := ""
	if s.plan.CuDNNSource == "image" {
		if tag := s.imageTag(s.plan.CUDA); tag != nil {
			tok = tag.CuDNNToken + "-"
		}
	}
	mirror := r.RegistryMirror
	if s.cfg.mirror != nil {
		mirror = *s.cfg.mirror
	}
	s.plan.RegistryMirror = mirror
	runtime := fmt.Sprintf(cudaRepo+":%s-%sruntime-%s", s.plan.CUDA, tok, osName)
	s.plan.RuntimeFlavor = "runtime"
	switch r.RuntimeBase {
	case "base":
		s.plan.RuntimeFlavor = "base"
	case "", "auto":
		// PyTorch's CUDA wheels depend on nvidia-*-cuXX wheels that carry
		// cuBLAS, cuDNN, NCCL...; on -runtime those libraries would ship
		// twice. cuDNN asked of the image (cudnn: 8|9) keeps -runtime.
		if s.tvar != nil && s.plan.CuDNNSource != "image" {
			s.plan.RuntimeFlavor = "base"
			s.fact(fmt.Sprintf("torch %s+%s brings its CUDA libraries as nvidia-* wheels, so the runtime stage uses the -base image (CUDA shipped once)", s.torch.Minor, s.tvar.Name), torchLibsSource, "A")
		}
	}
	if s.plan.RuntimeFlavor == "base" {
		// There is no cudnn variant of -base.
		runtime = fmt.Sprintf(cudaRepo+":%s-base-%s", s.plan.CUDA, osName)
	}
	s.plan.BaseImages = BaseImages{
		Devel:   MirrorRef(mirror, fmt.Sprintf(cudaRepo+":%s-%sdevel-%s", s.plan.CUDA, tok, osName)),
		Runtime: MirrorRef(mirror, runtime),
	}
	if req, ir, ok := cuda.ImageRequireCUDA(s.plan.CUDA); ok {
		if !slices.Contains(req.Brands(), "geforce") && !slices.Contains(req.Brands(), "geforcertx") {
			s.warn("GeForce/TITAN hosts need driver >= %s (CUDA %s natively): the image's NVIDIA_REQUIRE_CUDA has no GeForce brand clauses, so minor-version compatibility is refused at container start (NVIDIA_DISABLE_REQUIRE=1 overrides)", s.plan.MinDriver.Toolkit, cuda.MajorMinor(s.plan.CUDA))
		}
		s.fact(fmt.Sprintf("NVIDIA_REQUIRE_CUDA of nvidia/cuda:%s", ir.Image), ir.Source, ir.Confidence)
	}
	s.plan.Platforms = slices.Clone(r.Platforms)
	if len(s.plan.Platforms) == 0 {
		s.plan.Platforms = []string{DefaultPlatform}
	}
	return s.pythonProvider()
}

// torchLibsSource is where the "torch brings its own CUDA libraries" fact
// comes from (compat-data.md §4, [A]).
const torchLibsSource = "pytorch/pytorch .ci/manywheel/build_cuda.sh \"Using nvidia libs from pypi\"; pip freeze of torch+cuXXX installs (nvidia-cublas-cu12, nvidia-cudnn-cu12, ...)"

// cudaRepo is NVIDIA's CUDA repository on Docker Hub, named in full as
// every plan and lock records a base image (registry.NormalizeName's rule):
// docker.io/nvidia/cuda, never the short nvidia/cuda a reader has to know
// means Docker Hub.
const cudaRepo = "docker.io/nvidia/cuda"

// MirrorRef rewrites a Docker Hub reference ("nvidia/cuda:TAG") to pull
// through mirror ("MIRROR/nvidia/cuda:TAG"); an empty mirror leaves it.
func MirrorRef(mirror, ref string) string {
	if mirror == "" {
		return ref
	}
	ref = strings.TrimPrefix(ref, "docker.io/")
	ref = strings.TrimPrefix(ref, "index.docker.io/")
	return strings.TrimSuffix(mirror, "/") + "/" + ref
}

func (s *resolver) indexes() []string {
	if s.cfg.indexes != nil {
		return s.cfg.indexes
	}
	return s.r.WheelIndexes
}
