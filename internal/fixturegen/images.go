package main

import (
	"strings"
	"time"

	"github.com/kiln-build/kiln/cuda"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layerOrder is the full stack of the app image; the other images are
// prefixes of it. Names match the directories under -layers.
var layerOrder = []string{"base", "cudart", "runtime", "devel", "torch", "pipcache", "appsrc", "pycache", "cleanup"}

// bookwormOrder is Debian 12's base chain (scripts/fixtures.sh bookworm),
// for the nvidia/cuda:11.8.0-*-debian12 stand-in only.
var bookwormOrder = []string{"base-bookworm", "cudart-bookworm", "runtime-bookworm", "devel-bookworm"}

// CUDA is the version the fixture images are shaped after: Debian trixie's
// CUDA 12.4.1 packages, tagged like NVIDIA's 12.4.1 images.
const (
	cudaVersion   = "12.4.1"
	cudartVersion = "12.4.127-1"
	osTag         = "debian13"
)

// NVIDIA_REQUIRE_CUDA of nvidia/cuda:12.4.1 (amd64), as the compatibility
// data records it (compat-data.md §3.4): cuda>=12.4 or one of the 470, 525
// and 535 branches for each data-center brand.
var requireCUDA = func() string {
	req, _, ok := cuda.ImageRequireCUDA(cudaVersion)
	if !ok {
		panic("compatibility data has no NVIDIA_REQUIRE_CUDA for " + cudaVersion)
	}
	return req.String()
}()

const debianPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// step is one Dockerfile-like instruction: either a layer (layer != "") or
// a metadata-only history entry.
type step struct {
	layer      string
	createdBy  string // for metadata-only steps
	env        []string
	cmd        []string
	entrypoint []string
	workdir    string
	labels     map[string]string
}

type imageDef struct {
	name        string
	steps       []step
	compression Compression
	registryRef string // repository:tag under the registry host
	archive     string // docker-archive file name ("" = none)
	archiveTag  string
}

func env(kv ...string) step {
	return step{env: kv, createdBy: "ENV " + strings.Join(kv, " ")}
}

var (
	// -base as NVIDIA builds it: the OS, then cudart and the NVIDIA
	// environment; -runtime adds the CUDA libraries, -devel the toolkit.
	baseSteps = []step{
		{layer: "base"},
		{cmd: []string{"bash"}, createdBy: `CMD ["bash"]`},
		{labels: map[string]string{"maintainer": "NVIDIA CORPORATION <cudatools@nvidia.com>"},
			createdBy: `LABEL maintainer=NVIDIA CORPORATION <cudatools@nvidia.com>`},
		env("NVARCH=x86_64"),
		env("NVIDIA_REQUIRE_CUDA=" + requireCUDA),
		env("NV_CUDA_CUDART_VERSION=" + cudartVersion),
		env("CUDA_VERSION=" + cudaVersion),
		{layer: "cudart"},
		env("PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
		env("LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64"),
		env("NVIDIA_VISIBLE_DEVICES=all"),
		env("NVIDIA_DRIVER_CAPABILITIES=compute,utility"),
	}
	runtimeSteps = append(append([]step{}, baseSteps...),
		step{layer: "runtime"},
	)
	develSteps = append(append([]step{}, runtimeSteps...),
		step{layer: "devel"},
		env("LIBRARY_PATH=/usr/local/cuda/lib64/stubs"),
	)
	appSteps = append(append([]step{}, develSteps...),
		step{layer: "torch"},
		step{layer: "pipcache"},
		step{workdir: "/app", createdBy: "WORKDIR /app"},
		step{layer: "appsrc"},
		step{layer: "pycache"},
		step{layer: "cleanup"},
		env("PYTHONUNBUFFERED=1"),
		step{cmd: []string{"python3", "/app/serve.py"}, createdBy: `CMD ["python3", "/app/serve.py"]`},
	)
)

// The images and where they go. The naive app is gzip, as `docker build`
// and `docker push` leave it; its docker archive is the same content.
var imageDefs = []imageDef{
	{name: "base", steps: baseSteps, compression: Gzip, registryRef: "nvidia/cuda:" + cudaVersion + "-base-" + osTag},
	{name: "runtime", steps: runtimeSteps, compression: Gzip, registryRef: "nvidia/cuda:" + cudaVersion + "-runtime-" + osTag},
	{name: "devel", steps: develSteps, compression: Gzip, registryRef: "nvidia/cuda:" + cudaVersion + "-devel-" + osTag},
	{name: "app", steps: appSteps, compression: Gzip, registryRef: "kiln/naive-app:cu124",
		archive: "app.tar", archiveTag: "kiln/naive-app:cu124"},
}

func (d imageDef) layerNames() []string {
	var out []string
	for _, s := range d.steps {
		if s.layer != "" {
			out = append(out, s.layer)
		}
	}
	return out
}

// assemble builds the image from already-built layers (one per layer step,
// in order) and layer created_by strings.
func assemble(d imageDef, layers []v1.Layer, createdBy map[string]string, epoch time.Time) (v1.Image, error) {
	created := v1.Time{Time: epoch.UTC()}
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l}
	}
	img, err := mutate.Append(empty.Image, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = "amd64"
	cf.OS = "linux"
	cf.Created = created
	cf.History = nil
	cfg := v1.Config{Env: []string{debianPath}}
	for _, s := range d.steps {
		h := v1.History{Created: created, CreatedBy: s.createdBy}
		if s.layer != "" {
			h.CreatedBy = createdBy[s.layer]
			if strings.HasPrefix(h.CreatedBy, "RUN ") || strings.HasPrefix(h.CreatedBy, "COPY ") {
				h.Comment = "buildkit.dockerfile.v0"
			}
		} else {
			h.EmptyLayer = true
		}
		cf.History = append(cf.History, h)
		for _, kv := range s.env {
			cfg.Env = setEnv(cfg.Env, kv)
		}
		if s.cmd != nil {
			cfg.Cmd = s.cmd
		}
		if s.entrypoint != nil {
			cfg.Entrypoint = s.entrypoint
		}
		if s.workdir != "" {
			cfg.WorkingDir = s.workdir
		}
		for k, v := range s.labels {
			if cfg.Labels == nil {
				cfg.Labels = map[string]string{}
			}
			cfg.Labels[k] = v
		}
	}
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return img, nil
}

func setEnv(envs []string, kv string) []string {
	k := kv[:strings.IndexByte(kv, '=')+1]
	for i, e := range envs {
		if strings.HasPrefix(e, k) {
			envs[i] = kv
			return envs
		}
	}
	return append(envs, kv)
}
