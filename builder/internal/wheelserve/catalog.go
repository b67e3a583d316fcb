package wheelserve

// The catalog's stand-ins: a stand-in of PyTorch's and PyPI's indexes that
// answers every pip requirement of every recipe in kiln's catalog, offline,
// with the real index's file names and tags and the real wheels' dependency
// metadata (Requires-Dist), as far as public records (download.pytorch.org's
// and PyPI's file names, the wheels' METADATA, pip logs, PyPI's JSON) and
// kiln's data (recipes/data/torch.json) give them.
//
// What is derived, not listed here: the recipes and their pins (each catalog
// recipe is resolved with recipes.Resolve, no network), torch's CPython range,
// torchvision's, the CUDA variant's cuDNN pin, CUDA version, C++ ABI and GPU
// architectures (torch.json). What is listed here, because no data of kiln's
// says it: each torch build's other Requires-Dist pins (torchStacks, keyed by
// the exact torch version and variant, so that a recipe naming a torch
// without an entry fails CatalogStandIns and the tests), the dependencies of
// the recipes' extra pip packages (pipStandIns) and the PyPI projects they
// all pull in (pypiPool).
//
// Sources of the pins, and the assumptions where none was found:
//   - torch 2.6.0+cu124: exact, PyPI's METADATA of that (cu124) build.
//   - torch 2.5.1+cu124: triton==3.1.0 with python_version < "3.13" is real
//     (pip's conflict message); the nvidia pins are 2.6.0's, observed in a cu124 prefetch list.
//     ASSUMED: no nvidia-cusparselt-cu12 pin (2.6.0 has 0.6.2), and
//     typing-extensions>=4.8.0.
//   - torch 2.5.1+cu118: the nvidia-*-cu11 set and tags (manylinux1) were
//     seen in pip logs of torch 2.6/2.7 +cu118; ASSUMED unchanged in 2.5.1.
//   - torch 2.7.1+cu128: the set and triton 3.3.1 seen in a real environment
//     listing (vLLM's collect_env); the nvidia wheels' manylinux_2_27 tag is
//     ASSUMED from the 12.8.4.1 wheels' names.
//   - torch 2.9.1+cu130: PyTorch's generate_binary_build_matrix.py "13.0"
//     set of the 2.9 era (its cuDNN, 9.13.0.50, is torch.json's); triton
//     3.5.1 seen paired with 2.9.1.
//   - torch 2.11.0+cu128: ASSUMED to be torch 2.10.0's resolved set (a lock export)
//     with torch.json's cuDNN (9.17.1.4); triton 3.6.0 ("torch<2.12 pins
//     triton==3.6.0", TensorRT-LLM's requirements).
//   - torch 2.13.0+cu130: the cuda-toolkit[...] shape with
//     platform_system == "Linux" markers only was seen for a 2026 cu130 torch
//     with the same cuDNN pin (9.20.0.48, torch.json's); ASSUMED to be 2.13's.
//     triton==3.7.1 is TensorRT-LLM's statement for torch 2.13.0.
//   - Base requirements (filelock, typing-extensions, networkx, jinja2,
//     fsspec, sympy, setuptools for python >= 3.12): exact for 2.6.0;
//     ASSUMED for the others (sympy>=1.13.3 since 2.7 is seen in pip logs).
//     The opt-einsum/optree extras are left out.
//   - torchvision: numpy, torch==X (no local tag), pillow!=8.3.*,>=5.3.0
//     (pip and uv error texts); torchaudio: torch==X. Both take torch's platform tag (ASSUMED
//     for torchaudio).
//   - The platform tag follows the variant's C++ ABI in torch.json: the
//     pre-cxx11 builds (cu118/cu124 of torch <= 2.6) are linux_x86_64, the
//     cxx11 ones manylinux_2_28_x86_64 (the index's file names).
//   - flash-attn wheels: the plan's wheel name for every CPython (publish.yml),
//     Requires-Dist torch and einops; builds from source get FlashAttnSDist.
//   - bitsandbytes: py3-none-manylinux_2_24_x86_64 (PyPI's files); Requires-Dist
//     torch<3,>=2.0 and numpy>=1.17 (0.45), ASSUMED torch<3,>=2.3, numpy,
//     packaging for later releases.
//   - PyPI projects (numpy, pillow, nvidia-*, triton, jinja2, ...): plausible
//     versions and tags of their era, one version each (two of sympy, which
//     torch pins both ways); their own dependencies are the real ones as far
//     as known, the nvidia wheels' dependencies on each other are left out.
//
// Every stand-in package has KILN_STANDIN = True and a __version__; torch's
// answers the recipes' tests: torch.__version__ ("2.11.0+cu128"),
// torch.version.cuda ("12.8"), torch.cuda.is_available() (False),
// torch.cuda.get_arch_list() ([] without a GPU, as real torch; the compiled
// list is torch._C._cuda_getArchFlags()), torch.backends.cudnn.version()
// and torch._C._GLIBCXX_USE_CXX11_ABI. They carry no shared libraries: a
// test that loads one (ctypes.CDLL('libtorch_cuda.so')) needs the real
// wheels. The setuptools stand-in cannot build anything (its setup() and
// build backend say so): a build that compiles from source needs the real
// setuptools and wheel (Index.Remove them, then Index.AddDir real ones).

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/recipes"
)

// catalogPythons are the CPython minors the catalog's stand-ins are built
// for, where the real wheels exist; a recipe's own Python is added.
var catalogPythons = []string{"3.10", "3.11", "3.12", "3.13"}

// CatalogPlans resolves every recipe of kiln's catalog with the embedded
// data and no network, in the catalog's order (by name).
func CatalogPlans() ([]*recipes.Plan, error) {
	entries, err := recipes.Catalog()
	if err != nil {
		return nil, err
	}
	var out []*recipes.Plan
	for _, e := range entries {
		r, err := recipes.Parse("catalog/"+e.Name+".yaml", e.Source)
		if err != nil {
			return nil, err
		}
		p, err := recipes.Resolve(context.Background(), r)
		if err != nil {
			return nil, fmt.Errorf("catalog recipe %s: %w", e.Name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// CatalogStandIns returns stand-in wheels, sorted by file name, and source
// archives for every pip requirement of every catalog recipe
// (CatalogPlans) and everything those depend on, for each CPython the
// recipe's stack has real wheels for among 3.10-3.13 and the recipe's own.
// The same call gives the same wheels (and bytes). It fails when a recipe
// pins something it has no stand-in for (a torch build without a
// torchStacks entry, a pip package without a pipStandIns one).
func CatalogStandIns() ([]Wheel, []SDist, error) {
	plans, err := CatalogPlans()
	if err != nil {
		return nil, nil, err
	}
	db, err := recipes.Data()
	if err != nil {
		return nil, nil, err
	}
	s := &standIns{wheels: map[string]Wheel{}, sdists: map[string]SDist{}, pys: slices.Clone(catalogPythons)}
	for _, p := range plans {
		if p.Python != "" && !slices.Contains(s.pys, p.Python) {
			s.pys = append(s.pys, p.Python)
		}
	}
	slices.SortFunc(s.pys, cuda.CompareVersions)
	for _, p := range plans {
		if err := s.addPlan(db, p); err != nil {
			return nil, nil, fmt.Errorf("catalog recipe %s: %w", p.Name, err)
		}
	}
	for _, d := range pypiPool {
		if err := s.addDist(d); err != nil {
			return nil, nil, err
		}
	}
	var ws []Wheel
	for _, w := range s.wheels {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Filename() < ws[j].Filename() })
	var sds []SDist
	for _, sd := range s.sdists {
		sds = append(sds, sd)
	}
	sort.Slice(sds, func(i, j int) bool { return sds[i].Filename() < sds[j].Filename() })
	return ws, sds, nil
}

// CatalogIndex is an index of CatalogStandIns: point kiln's --wheel-index at
// Serve's URL and every catalog recipe resolves and installs offline.
func CatalogIndex() (*Index, error) {
	ws, sds, err := CatalogStandIns()
	if err != nil {
		return nil, err
	}
	ix, err := NewIndex(ws...)
	if err != nil {
		return nil, err
	}
	for _, sd := range sds {
		if err := ix.AddSDist(sd); err != nil {
			return nil, err
		}
	}
	return ix, nil
}

// dist is a stand-in project release: one wheel, or one per CPython when
// Tag holds "{cp}" (replaced by "cp311-cp311").
type dist struct {
	Name     string // as in the file name: "nvidia_cublas_cu12", "PyYAML"
	Version  string
	Tag      string // "py3-none-any", "{cp}-manylinux_2_28_x86_64"
	Package  string // import package ("" lower-case Name)
	Requires []string
	Meta     []string
	PyMin    string // oldest CPython with a wheel ("" any)
	PyMax    string // newest CPython with a wheel ("" any)
	Files    map[string][]byte
	pys      []string // set by the caller: the CPythons to build for
}

// torchStack is what kiln's data does not say about one torch build: its
// Requires-Dist besides the cuDNN pin (torch.json's).
type torchStack struct {
	requires []string // the pure-Python requirements
	// cuda are the CUDA libraries' requirements, each given marker; a
	// nvidia-cudnn-* name without a version gets torch.json's cuDNN. A
	// name==version requirement is served as a wheel tagged
	// py3-none-<nvTag>; any other is answered by extra.
	cuda   []string
	marker string
	nvTag  string
	triton dist // pinned with marker (and python_version < X when PyMax)
	extra  []dist
}

// fields splits a list written one item per line (or space).
func fields(s string) []string { return strings.Fields(s) }

var (
	reqs25 = []string{"filelock", "typing-extensions>=4.8.0", "networkx", "jinja2", "fsspec",
		`setuptools; python_version >= "3.12"`, `sympy==1.13.1; python_version >= "3.9"`}
	reqs26 = []string{"filelock", "typing-extensions>=4.10.0", "networkx", "jinja2", "fsspec",
		`setuptools; python_version >= "3.12"`, `sympy==1.13.1; python_version >= "3.9"`}
	reqs27 = []string{"filelock", "typing-extensions>=4.10.0", `setuptools; python_version >= "3.12"`,
		"sympy>=1.13.3", "networkx", "jinja2", "fsspec"}
	reqs29 = []string{"filelock", "typing-extensions>=4.10.0", `setuptools; python_version >= "3.12"`,
		"sympy>=1.13.3", "networkx>=2.5.1", "jinja2", "fsspec>=0.8.5"}

	x86Linux = `platform_system == "Linux" and platform_machine == "x86_64"`

	cu118Pins = fields(`
		nvidia-cuda-nvrtc-cu11==11.8.89 nvidia-cuda-runtime-cu11==11.8.89 nvidia-cuda-cupti-cu11==11.8.87
		nvidia-cudnn-cu11 nvidia-cublas-cu11==11.11.3.6 nvidia-cufft-cu11==10.9.0.58
		nvidia-curand-cu11==10.3.0.86 nvidia-cusolver-cu11==11.4.1.48 nvidia-cusparse-cu11==11.7.5.86
		nvidia-nccl-cu11==2.21.5 nvidia-nvtx-cu11==11.8.86`)
	cu124Pins25 = fields(`
		nvidia-cuda-nvrtc-cu12==12.4.127 nvidia-cuda-runtime-cu12==12.4.127 nvidia-cuda-cupti-cu12==12.4.127
		nvidia-cudnn-cu12 nvidia-cublas-cu12==12.4.5.8 nvidia-cufft-cu12==11.2.1.3
		nvidia-curand-cu12==10.3.5.147 nvidia-cusolver-cu12==11.6.1.9 nvidia-cusparse-cu12==12.3.1.170
		nvidia-nccl-cu12==2.21.5 nvidia-nvtx-cu12==12.4.127 nvidia-nvjitlink-cu12==12.4.127`)
	cu124Pins26 = fields(`
		nvidia-cuda-nvrtc-cu12==12.4.127 nvidia-cuda-runtime-cu12==12.4.127 nvidia-cuda-cupti-cu12==12.4.127
		nvidia-cudnn-cu12 nvidia-cublas-cu12==12.4.5.8 nvidia-cufft-cu12==11.2.1.3
		nvidia-curand-cu12==10.3.5.147 nvidia-cusolver-cu12==11.6.1.9 nvidia-cusparse-cu12==12.3.1.170
		nvidia-cusparselt-cu12==0.6.2 nvidia-nccl-cu12==2.21.5 nvidia-nvtx-cu12==12.4.127
		nvidia-nvjitlink-cu12==12.4.127`)

	tritonOld = "{cp}-manylinux_2_17_x86_64.manylinux2014_x86_64"
	tritonNew = "{cp}-manylinux_2_27_x86_64.manylinux_2_28_x86_64"
)

// torchStacks, by torch version and CUDA variant ("2.5.1+cu124"); see the
// file's comment for where each comes from.
var torchStacks = map[string]torchStack{
	"2.5.1+cu118": {requires: reqs25, cuda: cu118Pins, marker: x86Linux, nvTag: "manylinux1_x86_64",
		triton: dist{Name: "triton", Version: "3.1.0", Tag: tritonOld, Requires: []string{"filelock"}, PyMax: "3.12"}},
	"2.5.1+cu124": {requires: reqs25, cuda: cu124Pins25, marker: x86Linux, nvTag: "manylinux2014_x86_64",
		triton: dist{Name: "triton", Version: "3.1.0", Tag: tritonOld, Requires: []string{"filelock"}, PyMax: "3.12"}},
	"2.6.0+cu124": {requires: reqs26, cuda: cu124Pins26, marker: x86Linux, nvTag: "manylinux2014_x86_64",
		triton: dist{Name: "triton", Version: "3.2.0", Tag: tritonOld}},
	"2.7.1+cu128": {requires: reqs27, marker: x86Linux, nvTag: "manylinux_2_27_x86_64",
		cuda: fields(`
			nvidia-cuda-nvrtc-cu12==12.8.61 nvidia-cuda-runtime-cu12==12.8.57 nvidia-cuda-cupti-cu12==12.8.57
			nvidia-cudnn-cu12 nvidia-cublas-cu12==12.8.3.14 nvidia-cufft-cu12==11.3.3.41
			nvidia-curand-cu12==10.3.9.55 nvidia-cusolver-cu12==11.7.2.55 nvidia-cusparse-cu12==12.5.7.53
			nvidia-cusparselt-cu12==0.6.3 nvidia-nccl-cu12==2.26.2 nvidia-nvtx-cu12==12.8.55
			nvidia-nvjitlink-cu12==12.8.61 nvidia-cufile-cu12==1.13.0.11`),
		triton: dist{Name: "triton", Version: "3.3.1", Tag: tritonNew, Requires: []string{"setuptools>=40.8.0"}}},
	"2.9.1+cu130": {requires: reqs29, marker: x86Linux, nvTag: "manylinux_2_27_x86_64",
		cuda: fields(`
			nvidia-cuda-nvrtc==13.0.48 nvidia-cuda-runtime==13.0.48 nvidia-cuda-cupti==13.0.48
			nvidia-cudnn-cu13 nvidia-cublas==13.0.0.19 nvidia-cufft==12.0.0.15
			nvidia-curand==10.4.0.35 nvidia-cusolver==12.0.3.29 nvidia-cusparse==12.6.2.49
			nvidia-cusparselt-cu13==0.8.0 nvidia-nccl-cu13==2.27.7 nvidia-nvshmem-cu13==3.3.24
			nvidia-nvtx==13.0.39 nvidia-nvjitlink==13.0.39 nvidia-cufile==1.15.0.42`),
		triton: dist{Name: "triton", Version: "3.5.1", Tag: tritonNew}},
	"2.11.0+cu128": {requires: reqs29, marker: x86Linux, nvTag: "manylinux_2_27_x86_64",
		cuda: fields(`
			nvidia-cuda-nvrtc-cu12==12.8.93 nvidia-cuda-runtime-cu12==12.8.90 nvidia-cuda-cupti-cu12==12.8.90
			nvidia-cudnn-cu12 nvidia-cublas-cu12==12.8.4.1 nvidia-cufft-cu12==11.3.3.83
			nvidia-curand-cu12==10.3.9.90 nvidia-cusolver-cu12==11.7.3.90 nvidia-cusparse-cu12==12.5.8.93
			nvidia-cusparselt-cu12==0.7.1 nvidia-nccl-cu12==2.27.5 nvidia-nvshmem-cu12==3.4.5
			nvidia-nvtx-cu12==12.8.90 nvidia-nvjitlink-cu12==12.8.93 nvidia-cufile-cu12==1.13.1.3`),
		triton: dist{Name: "triton", Version: "3.6.0", Tag: tritonNew}},
	"2.13.0+cu130": {requires: reqs29, marker: `platform_system == "Linux"`, nvTag: "manylinux_2_27_x86_64",
		cuda: fields(`
			cuda-toolkit[cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.2
			nvidia-cublas<=13.1.1.3,>=13.1.0.3 cuda-bindings<14,>=13.0.3 nvidia-cudnn-cu13
			nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.29.7 nvidia-nvshmem-cu13==3.4.5`),
		triton: dist{Name: "triton", Version: "3.7.1", Tag: tritonNew},
		extra: append(cudaToolkit("13.0.2", "manylinux_2_27_x86_64", map[string]string{
			"cudart": "nvidia-cuda-runtime==13.0.96", "cufft": "nvidia-cufft==12.0.0.61",
			"cufile": "nvidia-cufile==1.15.1.6", "cupti": "nvidia-cuda-cupti==13.0.85",
			"curand": "nvidia-curand==10.4.0.35", "cusolver": "nvidia-cusolver==12.0.4.66",
			"cusparse": "nvidia-cusparse==12.6.3.3", "nvjitlink": "nvidia-nvjitlink==13.0.88",
			"nvrtc": "nvidia-cuda-nvrtc==13.0.88", "nvtx": "nvidia-nvtx==13.0.85"}),
			nvidiaDist("nvidia-cublas", "13.1.1.3", "manylinux_2_27_x86_64"),
			dist{Name: "cuda_bindings", Version: "13.0.3", Tag: "{cp}-manylinux_2_24_x86_64.manylinux_2_28_x86_64",
				Package: "cuda/bindings", Requires: []string{"cuda-pathfinder~=1.1"}},
			dist{Name: "cuda_pathfinder", Version: "1.3.0", Tag: "py3-none-any", Package: "cuda/pathfinder"},
		)},
}

// pipStandIns are the recipes' extra pip packages kiln has stand-ins for
// (the version is the recipe's pin): their import package and their
// Requires-Dist (the real ones of the pinned releases' era).
var pipStandIns = map[string]dist{
	"transformers": {Package: "transformers", Requires: fields(`filelock huggingface-hub<1.0,>=0.23.2
		numpy>=1.17 packaging>=20.0 pyyaml>=5.1 regex!=2019.12.17 requests safetensors>=0.4.1
		tokenizers<0.21,>=0.20 tqdm>=4.27`)},
	"accelerate": {Package: "accelerate", Requires: fields(`numpy<3.0.0,>=1.17 packaging>=20.0 psutil
		pyyaml torch>=1.10.0 huggingface-hub>=0.21.0 safetensors>=0.4.3`)},
}

const manylinux2014 = "manylinux_2_17_x86_64.manylinux2014_x86_64"

// pypiPool are the PyPI projects the stand-ins depend on, always served.
var pypiPool = []dist{
	{Name: "filelock", Version: "3.16.1", Tag: "py3-none-any"},
	{Name: "typing_extensions", Version: "4.12.2", Tag: "py3-none-any"},
	{Name: "networkx", Version: "3.4.2", Tag: "py3-none-any", Meta: []string{"Requires-Python: >=3.10"}},
	{Name: "jinja2", Version: "3.1.4", Tag: "py3-none-any", Requires: []string{"MarkupSafe>=2.0"}},
	{Name: "MarkupSafe", Version: "3.0.2", Tag: "{cp}-" + manylinux2014, Package: "markupsafe"},
	{Name: "fsspec", Version: "2024.10.0", Tag: "py3-none-any"},
	{Name: "sympy", Version: "1.13.1", Tag: "py3-none-any", Requires: []string{"mpmath<1.4,>=1.1.0"}},
	{Name: "sympy", Version: "1.13.3", Tag: "py3-none-any", Requires: []string{"mpmath<1.4,>=1.1.0"}},
	{Name: "mpmath", Version: "1.3.0", Tag: "py3-none-any"},
	{Name: "setuptools", Version: "75.6.0", Tag: "py3-none-any", Files: map[string][]byte{
		"setuptools/__init__.py":   []byte(setuptoolsInit("75.6.0")),
		"setuptools/build_meta.py": []byte(`raise ImportError("kiln stand-in setuptools: no build backend; serve the real setuptools to build from source")` + "\n"),
	}},
	{Name: "wheel", Version: "0.45.1", Tag: "py3-none-any"},
	{Name: "numpy", Version: "2.1.3", Tag: "{cp}-" + manylinux2014, Meta: []string{"Requires-Python: >=3.10"}},
	{Name: "pillow", Version: "11.0.0", Tag: "{cp}-manylinux_2_28_x86_64", Package: "PIL", Meta: []string{"Requires-Python: >=3.9"}},
	{Name: "einops", Version: "0.8.0", Tag: "py3-none-any"},
	{Name: "packaging", Version: "24.2", Tag: "py3-none-any"},
	{Name: "PyYAML", Version: "6.0.2", Tag: "{cp}-" + manylinux2014, Package: "yaml"},
	{Name: "regex", Version: "2024.11.6", Tag: "{cp}-" + manylinux2014},
	{Name: "requests", Version: "2.32.3", Tag: "py3-none-any", Requires: []string{"charset-normalizer<4,>=2", "idna<4,>=2.5", "urllib3<3,>=1.21.1", "certifi>=2017.4.17"}},
	{Name: "charset_normalizer", Version: "3.4.0", Tag: "{cp}-" + manylinux2014},
	{Name: "idna", Version: "3.10", Tag: "py3-none-any"},
	{Name: "urllib3", Version: "2.2.3", Tag: "py3-none-any"},
	{Name: "certifi", Version: "2024.8.30", Tag: "py3-none-any"},
	{Name: "tqdm", Version: "4.67.1", Tag: "py3-none-any"},
	{Name: "huggingface_hub", Version: "0.26.5", Tag: "py3-none-any", Requires: []string{"filelock", "fsspec>=2023.5.0", "packaging>=20.9", "pyyaml>=5.1", "requests", "tqdm>=4.42.1", "typing-extensions>=3.7.4.3"}},
	{Name: "tokenizers", Version: "0.20.3", Tag: "cp39-abi3-" + manylinux2014, Requires: []string{"huggingface-hub<1.0,>=0.16.4"}},
	{Name: "safetensors", Version: "0.4.5", Tag: "cp38-abi3-" + manylinux2014},
	{Name: "psutil", Version: "6.1.0", Tag: "cp36-abi3-manylinux_2_12_x86_64.manylinux2010_x86_64." + manylinux2014},
}

func setuptoolsInit(v string) string {
	return standInInit("setuptools", v) + `

def setup(**kw):
    raise SystemExit("kiln stand-in setuptools cannot build %r; serve the real setuptools to build from source" % kw.get("name"))
`
}

// standInInit is a stand-in package's __init__.py.
func standInInit(name, version string, body ...string) string {
	s := fmt.Sprintf("\"\"\"kiln stand-in for %s %s: no code of the project, only what kiln's\nrecipe tests ask of it.\"\"\"\nKILN_STANDIN = True\n__version__ = %q\n", name, version, version)
	for _, b := range body {
		s += b
	}
	return s
}

// nvidiaDist is a CUDA library wheel, nvidia-cublas-cu12 as nvidia/cublas.
func nvidiaDist(name, version, plat string) dist {
	sub := strings.TrimPrefix(name, "nvidia-")
	for _, cu := range []string{"-cu11", "-cu12", "-cu13"} {
		sub = strings.TrimSuffix(sub, cu)
	}
	pkg := "nvidia/" + strings.ReplaceAll(sub, "-", "_")
	return dist{Name: strings.ReplaceAll(name, "-", "_"), Version: version, Tag: "py3-none-" + plat, Package: pkg,
		Files: map[string][]byte{"nvidia/__init__.py": nil}}
}

// cudaToolkit is the cuda-toolkit metapackage, one extra per library
// (extras: extra -> "name==version"), and the libraries' wheels.
func cudaToolkit(version, plat string, extras map[string]string) []dist {
	d := dist{Name: "cuda_toolkit", Version: version, Tag: "py2.py3-none-any", Package: "cuda_toolkit"}
	out := []dist{{}}
	for _, x := range slices.Sorted(maps.Keys(extras)) {
		d.Meta = append(d.Meta, "Provides-Extra: "+x)
		// The real metapackage pins each library's release (X.Y.Z.*).
		d.Requires = append(d.Requires, fmt.Sprintf("%s.*; extra == %q", extras[x], x))
		name, v, _ := strings.Cut(extras[x], "==")
		out = append(out, nvidiaDist(name, v, plat))
	}
	out[0] = d
	return out
}

type standIns struct {
	wheels map[string]Wheel
	sdists map[string]SDist
	pys    []string // every CPython a wheel is built for
}

func (s *standIns) add(w Wheel) error {
	fn := w.Filename()
	if old, ok := s.wheels[fn]; ok && !reflect.DeepEqual(old, w) {
		return fmt.Errorf("two different stand-ins named %s", fn)
	}
	s.wheels[fn] = w
	return nil
}

// addDist adds d's wheels: one per CPython in d.pys (s.pys when nil)
// within d's range when its tag holds "{cp}".
func (s *standIns) addDist(d dist) error {
	pkg := d.Package
	if pkg == "" {
		pkg = strings.ToLower(strings.ReplaceAll(d.Name, "-", "_"))
	}
	files := map[string][]byte{pkg + "/__init__.py": []byte(standInInit(Normalize(d.Name), d.Version))}
	for k, v := range d.Files {
		files[k] = v
	}
	w := Wheel{Name: d.Name, Version: d.Version, Package: pkg, Files: files, Meta: d.Meta, Requires: d.Requires}
	if !strings.Contains(d.Tag, "{cp}") {
		w.Tag = d.Tag
		return s.add(w)
	}
	pys := d.pys
	if pys == nil {
		pys = s.pys
	}
	for _, py := range inRange(pys, d.PyMin, d.PyMax) {
		w.Tag = strings.ReplaceAll(d.Tag, "{cp}", cpTag(py)+"-"+cpTag(py))
		if err := s.add(w); err != nil {
			return err
		}
	}
	return nil
}

func cpTag(py string) string { return "cp" + strings.ReplaceAll(py, ".", "") }

// inRange keeps the CPythons from lo to hi ("" is open).
func inRange(pys []string, lo, hi string) []string {
	var out []string
	for _, py := range pys {
		if (lo == "" || cuda.CompareVersions(py, lo) >= 0) && (hi == "" || cuda.CompareVersions(py, hi) <= 0) {
			out = append(out, py)
		}
	}
	return out
}

// nextMinor is the CPython after py ("3.12" -> "3.13").
func nextMinor(py string) string {
	maj, min, _ := strings.Cut(py, ".")
	n, _ := strconv.Atoi(min)
	return maj + "." + strconv.Itoa(n+1)
}

func torchRelease(db *recipes.DB, version string) *recipes.TorchRelease {
	mm := cuda.MajorMinor(version)
	for i := range db.Torch.Releases {
		if db.Torch.Releases[i].Minor == mm {
			return &db.Torch.Releases[i]
		}
	}
	return nil
}

// torchPythons are the CPythons of pys torch's wheels exist for (its
// experimental ones too: PyTorch's index serves them, as cp313 for 2.5.1).
func torchPythons(rel *recipes.TorchRelease, pys []string) []string {
	hi := rel.PythonMax
	if rel.PythonExperimental != "" && cuda.CompareVersions(rel.PythonExperimental, hi) > 0 {
		hi = rel.PythonExperimental
	}
	return inRange(pys, rel.PythonMin, hi)
}

// visionPythons are the CPythons of pys torchvision's wheels exist for.
func visionPythons(rel *recipes.TorchRelease, pys []string) []string {
	pys = torchPythons(rel, pys)
	if lo, hi, ok := strings.Cut(rel.TorchvisionPython, "-"); ok {
		pys = inRange(pys, lo, hi)
	}
	return pys
}

// planPythons are the CPythons among 3.10-3.13 and the recipe's own for
// which the stand-ins install the whole of p's pip list.
func planPythons(db *recipes.DB, p *recipes.Plan) []string {
	pys := slices.Clone(catalogPythons)
	if p.Python != "" && !slices.Contains(pys, p.Python) {
		pys = append(pys, p.Python)
		slices.SortFunc(pys, cuda.CompareVersions)
	}
	if p.Torch == nil {
		return pys
	}
	rel := torchRelease(db, *p.Torch)
	if rel == nil {
		return nil
	}
	if p.Torchvision != nil {
		return visionPythons(rel, pys)
	}
	return torchPythons(rel, pys)
}

func (s *standIns) addPlan(db *recipes.DB, p *recipes.Plan) error {
	var rel *recipes.TorchRelease
	var tv *recipes.TorchVariant
	plat := ""
	if p.Torch != nil {
		if rel = torchRelease(db, *p.Torch); rel == nil {
			return fmt.Errorf("torch %s is not in kiln's data", *p.Torch)
		}
		for i := range rel.Variants {
			if p.TorchCUDAVariant != nil && rel.Variants[i].Name == *p.TorchCUDAVariant {
				tv = &rel.Variants[i]
			}
		}
		if tv == nil {
			return fmt.Errorf("torch %s: no CUDA variant in kiln's data", *p.Torch)
		}
		// The pre-cxx11-ABI builds are linux_x86_64, the others manylinux_2_28.
		plat = "linux_x86_64"
		if tv.CXX11ABI {
			plat = "manylinux_2_28_x86_64"
		}
	}
	for _, pp := range p.Pip {
		ver, ok := pp.Version()
		if !ok {
			return fmt.Errorf("pip %q: a stand-in needs a == pin", pp.Requirement)
		}
		var err error
		switch name := Normalize(pp.Name); {
		case pp.FromSource() && name != "flash-attn":
			err = fmt.Errorf("pip %q: no stand-in source archive", pp.Requirement)
		case name == "torch":
			err = s.addTorch(p, rel, tv, ver, plat)
		case name == "torchvision" || name == "torchaudio":
			if rel == nil {
				return fmt.Errorf("%s without torch", name)
			}
			pys := torchPythons(rel, s.pys)
			reqs := []string{"torch==" + *p.Torch}
			body := fmt.Sprintf("import torch  # noqa: F401\n\ncuda = %q\n", tv.CUDA)
			if name == "torchvision" {
				pys = visionPythons(rel, s.pys)
				reqs = []string{"numpy", "torch==" + *p.Torch, "pillow!=8.3.*,>=5.3.0"}
			}
			err = s.addVersioned(name, ver, plat, pys, reqs, body)
		case name == "flash-attn":
			err = s.addFlashAttn(p, rel, ver)
		case name == "bitsandbytes":
			reqs := []string{"torch<3,>=2.0", "numpy>=1.17"}
			if cuda.CompareVersions(ver, "0.46") >= 0 {
				reqs = []string{"torch<3,>=2.3", "numpy>=1.17", "packaging>=20.9"}
			}
			err = s.addDist(dist{Name: "bitsandbytes", Version: ver, Tag: "py3-none-manylinux_2_24_x86_64",
				Requires: reqs, Files: map[string][]byte{"bitsandbytes/__init__.py": []byte(standInInit("bitsandbytes", ver, "\nimport torch  # noqa: F401\n"))}})
		default:
			d, ok := pipStandIns[name]
			if !ok {
				return fmt.Errorf("pip %q: no stand-in (add its dependencies to pipStandIns in wheelserve/catalog.go)", pp.Requirement)
			}
			d.Name, d.Version, d.Tag = strings.ReplaceAll(name, "-", "_"), ver, "py3-none-any"
			err = s.addDist(d)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// addVersioned adds a torch-family wheel (torchvision, torchaudio) for pys.
func (s *standIns) addVersioned(name, ver, plat string, pys, reqs []string, body string) error {
	init := standInInit(name, ver, "\n", body)
	return s.addDist(dist{Name: name, Version: ver, Tag: "{cp}-" + plat, Requires: reqs, pys: pys,
		Files: map[string][]byte{name + "/__init__.py": []byte(init), name + "/version.py": []byte(fmt.Sprintf("__version__ = %q\n", ver))}})
}

func (s *standIns) addTorch(p *recipes.Plan, rel *recipes.TorchRelease, tv *recipes.TorchVariant, ver, plat string) error {
	key := *p.Torch + "+" + tv.Name
	if ver != key {
		return fmt.Errorf("pip torch==%s, plan torch %s", ver, key)
	}
	st, ok := torchStacks[key]
	if !ok {
		return fmt.Errorf("no stand-in for torch %s: add its Requires-Dist pins to torchStacks in wheelserve/catalog.go", key)
	}
	if tv.CuDNN == "" {
		return fmt.Errorf("torch %s: kiln's data gives no cuDNN to pin", key)
	}
	reqs := slices.Clone(st.requires)
	for _, c := range st.cuda {
		if strings.HasPrefix(c, "nvidia-cudnn-") && !strings.ContainsAny(c, "=<>") {
			c += "==" + tv.CuDNN
		}
		reqs = append(reqs, c+"; "+st.marker)
		name, v, ok := strings.Cut(c, "==")
		if ok && !strings.ContainsAny(name, "[<>") && !strings.Contains(v, "*") {
			if err := s.addDist(nvidiaDist(name, v, st.nvTag)); err != nil {
				return err
			}
		}
	}
	for _, d := range st.extra {
		if err := s.addDist(d); err != nil {
			return err
		}
	}
	tm := st.marker
	if st.triton.PyMax != "" {
		tm += fmt.Sprintf(" and python_version < %q", nextMinor(st.triton.PyMax))
	}
	reqs = append(reqs, "triton=="+st.triton.Version+"; "+tm)
	if err := s.addDist(st.triton); err != nil {
		return err
	}
	pys := torchPythons(rel, s.pys)
	var archs []string
	for _, a := range strings.Split(tv.Archs, ";") {
		a, ptx := strings.CutSuffix(strings.TrimSpace(a), "+PTX")
		if a == "" {
			continue
		}
		sm := strings.ReplaceAll(a, ".", "")
		archs = append(archs, "sm_"+sm)
		if ptx {
			archs = append(archs, "compute_"+sm)
		}
	}
	files := map[string][]byte{
		"torch/__init__.py": []byte(standInInit("torch", ver, `
from torch import _C, version, cuda, backends  # noqa: E402,F401
`)),
		"torch/version.py": []byte(fmt.Sprintf("__version__ = %q\ndebug = False\ncuda = %q\ngit_version = \"kiln-standin\"\nhip = None\nxpu = None\n", ver, tv.CUDA)),
		"torch/_C.py": []byte(fmt.Sprintf(`"""kiln stand-in for torch._C: the build's facts, no kernels."""
_GLIBCXX_USE_CXX11_ABI = %s


def _cuda_getArchFlags():
    return %q


def _cuda_getDeviceCount():
    return 0


def _cudnn_version():
    return %d
`, pyBool(tv.CXX11ABI), strings.Join(archs, " "), cudnnVersion(tv.CuDNN))),
		"torch/cuda/__init__.py": []byte(`"""kiln stand-in for torch.cuda: no GPU is ever available."""
import torch


def is_available():
    return False


def device_count():
    return 0


def get_arch_list():
    # As torch: the compiled architectures only when a GPU is usable.
    if not is_available():
        return []
    flags = torch._C._cuda_getArchFlags()
    return flags.split() if flags else []
`),
		"torch/backends/__init__.py": []byte("from torch.backends import cudnn  # noqa: F401\n"),
		"torch/backends/cudnn.py": []byte(`import torch


def is_available():
    return torch.cuda.is_available()


def version():
    return torch._C._cudnn_version()
`),
	}
	meta := []string{"Requires-Python: >=" + rel.PythonMin}
	return s.addDist(dist{Name: "torch", Version: ver, Tag: "{cp}-" + plat, Requires: reqs, Meta: meta, pys: pys, Files: files})
}

func (s *standIns) addFlashAttn(p *recipes.Plan, rel *recipes.TorchRelease, ver string) error {
	if p.FlashAttnBuild != nil {
		sd := FlashAttnSDist(ver)
		s.sdists[sd.Filename()] = sd
		return nil
	}
	if p.FlashAttnWheel == nil {
		return fmt.Errorf("flash-attn %s: neither a wheel nor a source build", ver)
	}
	// flash_attn-2.7.4.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl
	f := strings.Split(strings.TrimSuffix(*p.FlashAttnWheel, ".whl"), "-")
	if len(f) != 5 || f[0] != "flash_attn" {
		return fmt.Errorf("flash-attn wheel %q: want NAME-VERSION-PY-ABI-PLATFORM.whl", *p.FlashAttnWheel)
	}
	pys := s.pys
	if rel != nil {
		pys = torchPythons(rel, pys)
	}
	return s.addDist(dist{Name: "flash_attn", Version: f[1], Tag: "{cp}-" + f[4], Requires: []string{"torch", "einops"}, pys: pys,
		Files: map[string][]byte{"flash_attn/__init__.py": []byte(standInInit("flash-attn", ver, "\nimport torch  # noqa: F401\n"))}})
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// cudnnVersion is cuDNN's CUDNN_VERSION for "9.1.0.70" (90100; 8.x: 8700).
func cudnnVersion(v string) int {
	var n [3]int
	for i, f := range strings.SplitN(v, ".", 4) {
		if i < 3 {
			n[i], _ = strconv.Atoi(f)
		}
	}
	if n[0] >= 9 {
		return n[0]*10000 + n[1]*100 + n[2]
	}
	return n[0]*1000 + n[1]*100 + n[2]
}
