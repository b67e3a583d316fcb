package recipes

import (
	"context"
	"strings"
	"testing"
)

type resolveCase struct {
	name string
	yaml string
	// want: "key=value" checks on the plan when valid.
	want []string
	// err: substrings of the refusal; empty means the recipe must resolve.
	err []string
}

func planValue(p *Plan, key string) string {
	s := func(v *string) string {
		if v == nil {
			return "null"
		}
		return *v
	}
	switch key {
	case "cuda":
		return p.CUDA
	case "cudnn":
		return s(p.CuDNN)
	case "cudnn_source":
		return p.CuDNNSource
	case "python":
		return p.Python
	case "os":
		return p.OS
	case "torch":
		return s(p.Torch)
	case "variant":
		return s(p.TorchCUDAVariant)
	case "torchvision":
		return s(p.Torchvision)
	case "torchaudio":
		return s(p.Torchaudio)
	case "fa":
		return s(p.FlashAttn)
	case "fa_wheel":
		return s(p.FlashAttnWheel)
	case "fa_archs":
		if p.FlashAttnBuild == nil {
			return "null"
		}
		return p.FlashAttnBuild.CUDAArchs
	case "max_jobs":
		if p.FlashAttnBuild == nil {
			return "null"
		}
		return itoa(p.FlashAttnBuild.MaxJobs)
	case "bnb":
		return s(p.BitsAndBytes)
	case "bnb_lib":
		return s(p.BitsAndBytesLib)
	case "devel":
		return p.BaseImages.Devel
	case "runtime":
		return p.BaseImages.Runtime
	case "archs":
		return strings.Join(p.CUDAArchs, ",")
	case "min_driver":
		return p.MinDriver.Toolkit
	case "mvc":
		return p.MinDriver.MinorVersionCompat
	case "index":
		return p.TorchIndexURL
	case "warnings":
		return strings.Join(p.Warnings, "|")
	}
	return "?" + key
}

var resolveCases = []resolveCase{
	// ---- valid
	{"torch25 cu124 full", "name: a\ncuda: '12.4'\npython: '3.11'\ntorch: {version: 2.5.1, torchvision: true}\nflash_attn: {version: 2.7.4.post1}\nbitsandbytes: {version: 0.45.5}\ngpus: [a100, h100]\n",
		[]string{"cuda=12.4.1", "variant=cu124", "torchvision=0.20.1", "fa_wheel=flash_attn-2.7.4.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl", "bnb_lib=libbitsandbytes_cuda124.so", "archs=8.0,9.0", "min_driver=550.54.15", "mvc=525.60.13", "devel=docker.io/nvidia/cuda:12.4.1-devel-ubuntu22.04", "index=https://download.pytorch.org/whl/cu124", "cudnn=9.1.0.70", "cudnn_source=torch-wheel"}, nil},
	{"cuda only", "name: a\ncuda: '12.6'\n", []string{"cuda=12.6.3", "torch=null", "cudnn=9.5.1.17", "cudnn_source=image", "devel=docker.io/nvidia/cuda:12.6.3-cudnn-devel-ubuntu22.04"}, nil},
	{"cuda only no cudnn", "name: a\ncuda: '12.6'\ncudnn: none\n", []string{"devel=docker.io/nvidia/cuda:12.6.3-devel-ubuntu22.04", "cudnn=null"}, nil},
	{"torch wheels bring CUDA: -base runtime", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\n", []string{"devel=docker.io/nvidia/cuda:12.4.1-devel-ubuntu22.04", "runtime=docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "cudnn_source=torch-wheel"}, nil},
	{"runtime_base: runtime keeps -runtime", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nruntime_base: runtime\n", []string{"runtime=docker.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04"}, nil},
	{"no torch: -runtime with the image's cuDNN", "name: a\ncuda: '12.4'\n", []string{"runtime=docker.io/nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", "cudnn_source=image"}, nil},
	{"image cuDNN asked: -runtime", "name: a\ncuda: '12.4'\ncudnn: '9'\ntorch: {version: 2.5.1}\n", []string{"runtime=docker.io/nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"}, nil},
	{"cudnn8 token", "name: a\ncuda: '11.8'\ncudnn: '8'\n", []string{"devel=docker.io/nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04", "runtime=docker.io/nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04"}, nil},
	{"cudnn9 token 12.3", "name: a\ncuda: 12.3.2\ncudnn: '9'\n", []string{"devel=docker.io/nvidia/cuda:12.3.2-cudnn9-devel-ubuntu22.04", "min_driver=545.23.08"}, nil},
	{"torch unpinned newest for cuda 12.4", "name: a\ncuda: '12.4'\ntorch: {}\n", []string{"torch=2.6.0", "variant=cu124"}, nil},
	{"torch unpinned newest for cuda 12.8", "name: a\ncuda: '12.8'\ntorch: {}\n", []string{"torch=2.11.0", "variant=cu128"}, nil},
	{"torch minor only", "name: a\ntorch: {version: '2.7'}\n", []string{"torch=2.7.1", "variant=cu126", "cuda=12.6.3"}, nil},
	{"torch 2.7 blackwell picks cu128", "name: a\ntorch: {version: 2.7.1}\ngpus: [b200]\n", []string{"variant=cu128", "cuda=12.8.1", "archs=10.0"}, nil},
	{"torch 2.7 v100 picks cu126", "name: a\ntorch: {version: 2.7.1}\ngpus: [v100]\n", []string{"variant=cu126"}, nil},
	{"everything unpinned", "name: a\ntorch: {}\n", []string{"torch=2.13.0", "variant=cu130", "cuda=13.0.3", "os=ubuntu24.04"}, nil},
	{"python default newest", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\n", []string{"python=3.12"}, nil},
	{"python 3.10 float kept", "name: a\ncuda: 12.4\npython: 3.10\ntorch: {version: 2.5.1}\n", []string{"python=3.10", "cuda=12.4.1"}, nil},
	{"torchaudio pairing", "name: a\ncuda: '12.6'\ntorch: {version: 2.6.0, torchaudio: true, torchvision: true}\n", []string{"torchaudio=2.6.0", "torchvision=0.21.0"}, nil},
	{"fa unpinned newest wheel", "name: a\ncuda: '12.4'\npython: '3.11'\ntorch: {version: 2.5.1}\nflash_attn: {}\ngpus: [h100]\n", []string{"fa=2.8.3.post1", "fa_wheel=flash_attn-2.8.3.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"}, nil},
	{"fa abi true for torch 2.7", "name: a\ncuda: '12.8'\npython: '3.12'\ntorch: {version: 2.7.1}\nflash_attn: {version: 2.8.3}\n", []string{"fa_wheel=flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"}, nil},
	{"fa cu11 wheel", "name: a\ncuda: '11.8'\npython: '3.11'\ntorch: {version: 2.5.1}\nflash_attn: {version: 2.7.0.post2}\n", []string{"fa_wheel=flash_attn-2.7.0.post2+cu11torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"}, nil},
	{"fa bucket token 2.6.3", "name: a\ncuda: '12.1'\npython: '3.11'\ntorch: {version: 2.4.1}\nflash_attn: {version: 2.6.3}\n", []string{"fa_wheel=flash_attn-2.6.3+cu123torch2.4cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"}, nil},
	{"fa old wheel lacks sm_100 -> source", "name: a\ncuda: '12.8'\npython: '3.12'\ntorch: {version: 2.6.0, variant: cu126}\nflash_attn: {version: 2.7.4.post1}\ngpus: [b200]\n", nil, []string{"no kernels for B200"}},
	{"fa source build arm64", "name: a\ncuda: '12.8'\npython: '3.12'\ntorch: {version: 2.7.1}\nflash_attn: {}\ngpus: [gh200]\nplatforms: [linux/arm64]\nbuild: {memory_gb: 36, cpus: 32}\n", []string{"fa_wheel=null", "fa_archs=90", "max_jobs=4"}, nil},
	{"fa forced source", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nflash_attn: {build: source}\ngpus: [a10, l4, h100]\n", []string{"fa_archs=80;90", "max_jobs=3", "fa_wheel=null"}, nil},
	{"fa python 3.13 cap", "name: a\ncuda: '12.8'\ntorch: {version: 2.9.1}\nflash_attn: {}\n", []string{"python=3.13"}, nil},
	{"bnb fallback 0.50 cu129", "name: a\ncuda: '12.9'\ntorch: {version: 2.8.0}\nbitsandbytes: {}\n", []string{"bnb=0.50.1", "bnb_lib=libbitsandbytes_cuda128.so"}, nil},
	{"bnb exact 0.47 cu129", "name: a\ncuda: '12.9'\ntorch: {version: 2.8.0}\nbitsandbytes: {version: 0.47.0}\n", []string{"bnb_lib=libbitsandbytes_cuda129.so"}, nil},
	{"bnb t4 int8 ok", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nbitsandbytes: {}\ngpus: [t4]\n", []string{"bnb=0.50.1"}, nil},
	{"bnb v100 int8 warning", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nbitsandbytes: {}\ngpus: [v100]\n", []string{"bnb=0.50.1"}, nil},
	{"mirror rewrite", "name: a\ncuda: '12.4'\nregistry_mirror: mirror.local:5000\n", []string{"devel=mirror.local:5000/nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"}, nil},
	{"wheel index overrides torch index", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nwheel_indexes: ['http://127.0.0.1:9/simple']\n", []string{"index=http://127.0.0.1:9/simple"}, nil},
	{"ubuntu24 12.6", "name: a\ncuda: '12.6'\nos: ubuntu24.04\n", []string{"devel=docker.io/nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04"}, nil},
	{"debian12 warns", "name: a\ncuda: 11.8.0\ncudnn: none\nos: debian12\n", []string{"devel=docker.io/nvidia/cuda:11.8.0-devel-debian12", "warnings~not an nvidia/cuda flavour"}, nil},
	{"geforce warning on 12.8", "name: a\ncuda: '12.8'\n", []string{"warnings~GeForce/TITAN hosts need driver >= 570.124.06"}, nil},
	{"h100 on 11.8 ok", "name: a\ncuda: '11.8'\ngpus: [h100]\n", []string{"archs=9.0", "min_driver=520.61.05", "mvc=450.80.02"}, nil},
	{"sm arch given", "name: a\ncuda: '12.8'\ngpus: [sm_120, sm_89]\n", []string{"archs=8.9,12.0"}, nil},
	{"cuda13 t4 ok", "name: a\ncuda: '13.0'\ngpus: [t4]\n", []string{"archs=7.5", "min_driver=580.95.05"}, nil},
	{"no torch python is the OS python", "name: a\ncuda: '12.8'\n", []string{"python=3.10"}, nil},
	{"explicit variant minor mismatch warns", "name: a\ncuda: '12.8'\ntorch: {version: 2.6.0, variant: cu126}\n", []string{"variant=cu126", "warnings~nvcc minor mismatch"}, nil},
	// ---- torch 2.12 (issue 16): CUDA 12.6 and 13.0 stable, 13.2 experimental, 12.8 dropped
	{"torch 2.12 cu130", "name: a\ncuda: '13.0'\ntorch: {version: 2.12.0, torchvision: true}\n", []string{"torch=2.12.0", "variant=cu130", "cuda=13.0.3", "cudnn=9.20.0.48", "torchvision=0.27.0", "os=ubuntu24.04", "index=https://download.pytorch.org/whl/cu130", "devel=docker.io/nvidia/cuda:13.0.3-devel-ubuntu24.04", "runtime=docker.io/nvidia/cuda:13.0.3-base-ubuntu24.04"}, nil},
	{"torch 2.12 cu126", "name: a\ncuda: '12.6'\ntorch: {version: '2.12'}\n", []string{"torch=2.12.1", "variant=cu126", "cuda=12.6.3", "cudnn=9.10.2.21"}, nil},
	{"torch 2.12 minor only picks stable cu130", "name: a\ntorch: {version: '2.12'}\n", []string{"variant=cu130", "cuda=13.0.3"}, nil},
	{"torch 2.12 cu132 experimental", "name: a\ncuda: '13.2'\ntorch: {version: 2.12.0}\n", []string{"variant=cu132", "cuda=13.2.1", "warnings~experimental CUDA variant"}, nil},
	{"torch 2.12 v100 picks cu126", "name: a\ntorch: {version: 2.12.0}\ngpus: [v100]\n", []string{"variant=cu126"}, nil},
	{"torch 2.12 torchaudio pinned warns", "name: a\ncuda: '13.0'\ntorch: {version: 2.12.0, torchaudio: 2.12.0}\n", []string{"torchaudio=2.12.0", "warnings~no torchaudio release was announced for torch 2.12"}, nil},
	// ---- companions checked against Python
	{"torch 2.5 py3.13 without torchvision resolves", "name: a\ncuda: '12.4'\npython: '3.13'\ntorch: {version: 2.5.1}\n", []string{"python=3.13", "torchvision=null", "warnings~Python 3.13 is experimental for torch 2.5"}, nil},
	{"torch 2.6 py3.13 torchvision 0.21 ok", "name: a\ncuda: '12.6'\npython: '3.13'\ntorch: {version: 2.6.0, torchvision: true}\n", []string{"torchvision=0.21.0"}, nil},
	{"torch 2.5 torchvision python default stays 3.12", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1, torchvision: true}\n", []string{"python=3.12", "torchvision=0.20.1"}, nil},
	{"torch 2.3 py3.12 experimental torchvision 0.18 ok", "name: a\ncuda: '12.1'\npython: '3.12'\ntorch: {version: 2.3.1, torchvision: true}\n", []string{"torchvision=0.18.1"}, nil},
	{"torch 2.5 py3.13 torchaudio unverified warns", "name: a\ncuda: '12.4'\npython: '3.13'\ntorch: {version: 2.5.1, torchaudio: true}\n", []string{"torchaudio=2.5.1", "warnings~no data on torchaudio cp313 wheels"}, nil},
	// ---- nvidia/cuda 13.x tags (issue 16)
	{"cuda 13.0 newest patch", "name: a\ncuda: '13.0'\n", []string{"cuda=13.0.3", "cudnn=9", "cudnn_source=image", "devel=docker.io/nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04", "warnings~does not know the exact cuDNN of nvidia/cuda:13.0.3-cudnn-*", "warnings~GeForce/TITAN hosts need driver >= 580.95.05"}, nil},
	{"cuda 13.1 known tag", "name: a\ncuda: '13.1'\ncudnn: none\n", []string{"cuda=13.1.2", "devel=docker.io/nvidia/cuda:13.1.2-devel-ubuntu24.04", "min_driver=590.48.01"}, nil},
	{"cuda 13.2 known tag", "name: a\ncuda: '13.2'\ncudnn: none\n", []string{"cuda=13.2.1", "min_driver=595.58.03"}, nil},
	{"cuda 12.9 newest patch", "name: a\ncuda: '12.9'\ncudnn: none\n", []string{"cuda=12.9.2"}, nil},
	{"cuda 13.3 known tag", "name: a\ncuda: '13.3'\ncudnn: none\n", []string{"cuda=13.3.0", "min_driver=610.43.02"}, nil},
	{"cuda 13.0.3 pinned cudnn 9", "name: a\ncuda: 13.0.3\ncudnn: '9'\n", []string{"cudnn=9", "devel=docker.io/nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04"}, nil},
	// ---- platforms
	{"bnb 0.50 arm64 ok", "name: a\ncuda: '12.8'\ntorch: {version: 2.7.1}\nbitsandbytes: {}\nplatforms: [linux/arm64]\n", []string{"bnb=0.50.1"}, nil},
	{"bnb 0.45.5 arm64 unverified", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nbitsandbytes: {version: 0.45.5}\nplatforms: [linux/arm64]\n", []string{"bnb=0.45.5", "warnings~no data on bitsandbytes 0.45.5 wheels for linux/arm64"}, nil},
	// ---- refusals
	{"torch 2.12 no cu128", "name: a\ncuda: '12.8'\ntorch: {version: 2.12.0}\n", nil, []string{"torch 2.12 has no cu128 wheels (it has cu126, cu130, cu132)", "torch 2.11 or 2.10 with cuda 12.8"}},
	{"torch 2.12 torchaudio unsettled", "name: a\ncuda: '13.0'\ntorch: {version: 2.12.0, torchaudio: true}\n", nil, []string{"torch.torchaudio: no torchaudio release is known to pair with torch 2.12", "will not name a torchaudio version", "torchaudio: false", "https://download.pytorch.org/whl/cu130/torchaudio/", "torch 2.11 (torchaudio 2.11.0)"}},
	{"torch 2.5 py3.13 torchvision refused", "name: a\ncuda: '12.4'\npython: '3.13'\ntorch: {version: 2.5.1, torchvision: true}\n", nil, []string{"torch.torchvision: torchvision 0.20 has no cp313 wheels (its wheels are for Python 3.9-3.12)", "torch ≥ 2.6 (torchvision 0.21 is the first with cp313 wheels)", "python: \"3.12\"", "torchvision: false"}},
	{"torch 2.2 py3.12 torchvision refused", "name: a\ncuda: '12.1'\npython: '3.12'\ntorch: {version: 2.2.2, torchvision: true}\n", nil, []string{"torchvision 0.17 has no cp312 wheels", "torch ≥ 2.3", "python: \"3.11\""}},
	{"explicit torchvision version checked", "name: a\ncuda: '12.6'\npython: '3.13'\ntorch: {version: 2.6.0, torchvision: 0.20.1}\n", nil, []string{"torchvision 0.20 has no cp313 wheels"}},
	{"cudnn 8 on 13.0", "name: a\ncuda: '13.0'\ncudnn: '8'\n", nil, []string{"nvidia/cuda:13.0.3 images ship cuDNN 9, not cuDNN 8"}},
	{"fa wheel python alternatives", "name: a\ncuda: '12.4'\npython: '3.13'\ntorch: {version: 2.5.1}\nflash_attn: {version: 2.7.0.post2, build: wheel}\n", nil, []string{"FlashAttention 2.7.0.post2 publishes wheels for Python 3.8-3.12, not 3.13", "python: \"3.12\" (FlashAttention 2.7.0.post2 wheels are for Python 3.8-3.12)", "flash_attn.build: auto"}},
	{"fa wheel arm64 alternatives", "name: a\ncuda: '12.4'\npython: '3.11'\ntorch: {version: 2.5.1}\nflash_attn: {build: wheel}\nplatforms: [linux/arm64]\n", nil, []string{"publishes no linux/arm64 wheels", "platforms: [linux/amd64] (no FlashAttention release kiln knows publishes linux/arm64 wheels)"}},
	{"torch newer than the data", "name: a\ntorch: {version: '2.14'}\n", nil, []string{"torch 2.14 is newer than kiln's data", "newest known: 2.13", "kiln compat refresh -o compat.json", "torch 2.13"}},
	{"torch patch newer than the data", "name: a\ntorch: {version: 2.13.4}\n", nil, []string{"torch 2.13.4 is newer than kiln's data", "kiln compat refresh -o compat.json", "torch 2.13.0"}},
	{"torch 2.12.1 known", "name: a\ncuda: '13.0'\ntorch: {version: 2.12.1}\n", []string{"torch=2.12.1", "variant=cu130"}, nil},
	{"torch 2.13 cu126", "name: a\ncuda: '12.6'\ntorch: {version: 2.13.0}\n", []string{"torch=2.13.0", "variant=cu126"}, nil},
	{"torch 2.13 cu130", "name: a\ntorch: {version: '2.13', variant: cu130}\n", []string{"torch=2.13.0", "variant=cu130", "torchvision=null"}, nil},
	{"torch 2.8 no cu124", "name: a\ncuda: '12.4'\ntorch: {version: 2.8.0}\n", nil, []string{"torch 2.8 has no cu124 wheels", "cu126, cu128, cu129", "cuda: \"12.6\" or \"12.8\" or \"12.9\" with torch 2.8", "torch 2.6 or 2.5 with cuda 12.4"}},
	{"torch 2.6 no cu128", "name: a\ncuda: '12.8'\ntorch: {version: 2.6.0}\n", nil, []string{"torch 2.6 has no cu128 wheels"}},
	{"torch 2.8 no cu118", "name: a\ncuda: '11.8'\ntorch: {version: 2.8.0}\n", nil, []string{"torch 2.8 has no cu118 wheels", "torch 2.7 or 2.6 with cuda 11.8"}},
	{"fa t4", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nflash_attn: {}\ngpus: [t4]\n", nil, []string{"FlashAttention 2 needs sm_80 or newer", "T4 is sm_75", "scaled_dot_product_attention"}},
	{"fa v100", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nflash_attn: {}\ngpus: [v100]\n", nil, []string{"FlashAttention 2 needs sm_80", "V100 is sm_70"}},
	{"cuda13 v100", "name: a\ncuda: '13.0'\ngpus: [v100]\n", nil, []string{"CUDA 13.0 dropped sm_70", "cuda: \"12.9\" or older"}},
	{"h100 on 11.7", "name: a\ncuda: '11.7'\ngpus: [h100]\n", nil, []string{"sm_90 needs CUDA ≥ 11.8", "cuda: \"11.8\" or newer"}},
	{"b200 on 12.6", "name: a\ncuda: '12.6'\ngpus: [b200]\n", nil, []string{"sm_100 needs CUDA ≥ 12.8"}},
	{"torch 2.7 cu128 lacks sm_70", "name: a\ntorch: {version: 2.7.1, variant: cu128}\ngpus: [v100]\n", nil, []string{"no kernels for V100", "cuda 12.6 (cu126)"}},
	{"cuda 12.7 does not exist", "name: a\ncuda: '12.7'\n", nil, []string{"there is no CUDA 12.7"}},
	{"cuda 13.4 unknown", "name: a\ncuda: '13.4'\n", nil, []string{"CUDA 13.4 is not in kiln's driver table"}},
	{"unknown torch minor", "name: a\ntorch: {version: '2.0'}\n", nil, []string{"kiln has no data for torch 2.0"}},
	{"unknown torch patch", "name: a\ntorch: {version: 2.5.7}\n", nil, []string{"torch 2.5.7 is not a known release", "2.5.0, 2.5.1"}},
	{"python out of range", "name: a\ncuda: '12.4'\npython: '3.13'\ntorch: {version: 2.4.1}\n", nil, []string{"torch 2.4 supports Python 3.8-3.12, not 3.13"}},
	{"cudnn 8 on 12.4", "name: a\ncuda: '12.4'\ncudnn: '8'\n", nil, []string{"nvidia/cuda:12.4.1 images ship cuDNN 9.1.0.70, not cuDNN 8", "cuda: \"12.2.2\""}},
	{"ubuntu24 on 12.4", "name: a\ncuda: '12.4'\nos: ubuntu24.04\n", nil, []string{"publishes ubuntu24.04 images from CUDA 12.5.1"}},
	{"ubuntu20 on 13", "name: a\ncuda: '13.0'\nos: ubuntu20.04\n", nil, []string{"no ubuntu20.04 images for CUDA 13.0.3"}},
	{"fa without torch", "name: a\ncuda: '12.4'\nflash_attn: {}\n", nil, []string{"FlashAttention needs torch"}},
	{"bnb without torch", "name: a\ncuda: '12.4'\nbitsandbytes: {}\n", nil, []string{"bitsandbytes picks its CUDA library from torch.version.cuda"}},
	{"bnb 0.45.5 no cu129", "name: a\ncuda: '12.9'\ntorch: {version: 2.8.0}\nbitsandbytes: {version: 0.45.5}\n", nil, []string{"ships no libbitsandbytes_cuda129.so", "bitsandbytes 0.50.1"}},
	{"bnb 0.48 maxwell", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nbitsandbytes: {version: 0.48.2}\ngpus: [sm_52]\n", nil, []string{"needs compute capability >= 6.0"}},
	{"bnb unknown version", "name: a\ncuda: '12.4'\ntorch: {version: 2.5.1}\nbitsandbytes: {version: 0.1.0}\n", nil, []string{"kiln has no data for bitsandbytes 0.1.0"}},
	{"fa wheel mode unavailable", "name: a\ncuda: '12.8'\ntorch: {version: 2.9.1}\nflash_attn: {build: wheel}\n", nil, []string{"no prebuilt FlashAttention wheel fits"}},
	{"fa too old for cuda", "name: a\ncuda: '11.8'\ntorch: {version: 2.5.1}\nflash_attn: {version: 2.7.4.post1}\n", nil, []string{"FlashAttention 2.7.4.post1 needs CUDA >= 12.0"}},
	{"variant major mismatch", "name: a\ncuda: '11.8'\ntorch: {version: 2.5.1, variant: cu124}\n", nil, []string{"extensions (FlashAttention, custom ops) fail to build"}},
	{"no cuda no torch", "name: a\n", nil, []string{"set cuda or torch"}},
	{"torch cuda12.4 no torch fits blackwell", "name: a\ncuda: '12.4'\ntorch: {}\ngpus: [b200]\n", nil, []string{"no torch release kiln knows fits cuda 12.4 and B200"}},
}

func TestResolveTable(t *testing.T) {
	if len(resolveCases) < 40 {
		t.Fatalf("only %d cases", len(resolveCases))
	}
	for _, tc := range resolveCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse("kiln.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			p, err := Resolve(context.Background(), r)
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatalf("resolved, want refusal %q", tc.err)
				}
				if _, ok := err.(*ResolveError); !ok {
					t.Errorf("error is %T, want *ResolveError", err)
				}
				for _, e := range tc.err {
					if !strings.Contains(err.Error(), e) {
						t.Errorf("error %q\n lacks %q", err, e)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			for _, w := range tc.want {
				if k, sub, ok := strings.Cut(w, "~"); ok {
					if got := planValue(p, k); !strings.Contains(got, sub) {
						t.Errorf("%s = %q, want it to contain %q", k, got, sub)
					}
					continue
				}
				k, v, _ := strings.Cut(w, "=")
				if got := planValue(p, k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if p.Warnings == nil || p.CUDAArchs == nil || p.Pip == nil {
				t.Error("nil slices in plan")
			}
		})
	}
}

func TestMirrorRef(t *testing.T) {
	if got := MirrorRef("m:5000/hub/", "nvidia/cuda:12.4.1-devel-ubuntu22.04"); got != "m:5000/hub/nvidia/cuda:12.4.1-devel-ubuntu22.04" {
		t.Error(got)
	}
	if got := MirrorRef("", "nvidia/cuda:x"); got != "nvidia/cuda:x" {
		t.Error(got)
	}
	if got := MirrorRef("m", "docker.io/nvidia/cuda:x"); got != "m/nvidia/cuda:x" {
		t.Error(got)
	}
}
