package wheelserve

import (
	"archive/zip"
	"bytes"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/recipes"
)

type catalogFixture struct {
	plans  []*recipes.Plan
	db     *recipes.DB
	wheels []Wheel
	sdists []SDist
}

var catalogOnce = sync.OnceValues(func() (*catalogFixture, error) {
	f := &catalogFixture{}
	var err error
	if f.plans, err = CatalogPlans(); err != nil {
		return nil, err
	}
	if f.db, err = recipes.Data(); err != nil {
		return nil, err
	}
	if f.wheels, f.sdists, err = CatalogStandIns(); err != nil {
		return nil, err
	}
	return f, nil
})

func catalog(t *testing.T) *catalogFixture {
	t.Helper()
	f, err := catalogOnce()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tagFits says whether a wheel tag installs on CPython py.
func tagFits(tag, py string) bool {
	pyTag, abi, _ := strings.Cut(tag, "-")
	for _, t := range strings.Split(pyTag, ".") {
		switch {
		case t == "py3":
			return true
		case abi == "abi3" || strings.HasPrefix(abi, "abi3-"):
			if strings.HasPrefix(t, "cp3") && cuda.CompareVersions("3."+t[3:], py) <= 0 {
				return true
			}
		case t == cpTag(py):
			return true
		}
	}
	return false
}

// find is the stand-in wheel that answers pp on CPython py.
func (f *catalogFixture) find(pp recipes.PipPackage, py string) *Wheel {
	want, _ := pp.Version()
	for i, w := range f.wheels {
		if Normalize(w.Name) == Normalize(pp.Name) && (w.Version == want || !strings.Contains(want, "+") && strings.HasPrefix(w.Version, want+"+")) && tagFits(w.Tag, py) {
			return &f.wheels[i]
		}
	}
	return nil
}

func (f *catalogFixture) wheel(fn string) *Wheel {
	for i, w := range f.wheels {
		if w.Filename() == fn {
			return &f.wheels[i]
		}
	}
	return nil
}

// sourceBuilt says whether pp is compiled from source in p (its stand-in
// is an sdist).
func sourceBuilt(p *recipes.Plan, pp recipes.PipPackage) bool {
	return pp.FromSource() || pp.Name == "flash-attn" && p.FlashAttnBuild != nil
}

// wheelFiles unzips w.
func wheelFiles(t *testing.T, w Wheel) map[string]string {
	t.Helper()
	b, err := w.Build()
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range zr.File {
		r, _ := f.Open()
		c, _ := io.ReadAll(r)
		r.Close()
		out[f.Name] = string(c)
	}
	return out
}

// requiresDist are the Requires-Dist values of w's METADATA.
func requiresDist(t *testing.T, w Wheel) []string {
	t.Helper()
	var out []string
	for n, c := range wheelFiles(t, w) {
		if strings.HasSuffix(n, ".dist-info/METADATA") {
			for _, l := range strings.Split(c, "\n") {
				if v, ok := strings.CutPrefix(l, "Requires-Dist: "); ok {
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// reqName is a requirement's project name.
func reqName(r string) string {
	if i := strings.IndexAny(r, "[<>=!~; "); i >= 0 {
		r = r[:i]
	}
	return Normalize(r)
}

// markerHolds evaluates the markers the stand-ins write (clauses joined
// by "and": platform_system, platform_machine, python_version, extra) on
// x86_64 Linux with CPython py and no extra.
func markerHolds(t *testing.T, m, py string) bool {
	t.Helper()
	if m == "" {
		return true
	}
	for _, c := range strings.Split(m, " and ") {
		f := strings.Fields(c)
		if len(f) != 3 {
			t.Fatalf("marker clause %q", c)
		}
		val := strings.Trim(f[2], `"'`)
		var have string
		switch f[0] {
		case "platform_system":
			have = "Linux"
		case "platform_machine":
			have = "x86_64"
		case "python_version":
			have = py
		case "extra":
			return false
		default:
			t.Fatalf("marker variable %q", f[0])
		}
		cmp := cuda.CompareVersions(have, val)
		if f[0] != "python_version" {
			cmp = strings.Compare(have, val)
		}
		ok := map[string]bool{"==": cmp == 0, "!=": cmp != 0, "<": cmp < 0, "<=": cmp <= 0, ">": cmp > 0, ">=": cmp >= 0}[f[1]]
		if !ok {
			return false
		}
	}
	return true
}

// TestCatalogStandInsCoverEveryRecipe: every pip requirement of every
// catalog recipe has a stand-in for each CPython the recipe's stack has
// real wheels for among 3.10-3.13, and for the recipe's own Python; a
// recipe added to the catalog without stand-ins fails here (or in
// CatalogStandIns).
func TestCatalogStandInsCoverEveryRecipe(t *testing.T) {
	f := catalog(t)
	if len(f.plans) == 0 {
		t.Fatal("no catalog recipes")
	}
	for _, p := range f.plans {
		pys := planPythons(f.db, p)
		if !slices.Contains(pys, p.Python) {
			t.Errorf("%s: its Python %s is not among the stand-ins' %v", p.Name, p.Python, pys)
		}
		if len(pys) < 3 {
			t.Errorf("%s: stand-ins for %v only", p.Name, pys)
		}
		if len(p.Pip) == 0 {
			t.Errorf("%s: no pip requirements", p.Name)
		}
		for _, pp := range p.Pip {
			if sourceBuilt(p, pp) {
				v, _ := pp.Version()
				if !slices.ContainsFunc(f.sdists, func(s SDist) bool { return Normalize(s.Name) == Normalize(pp.Name) && s.Version == v }) {
					t.Errorf("%s: no source archive for %s", p.Name, pp.Requirement)
				}
				continue
			}
			for _, py := range pys {
				if f.find(pp, py) == nil {
					t.Errorf("%s: no stand-in for %s on CPython %s", p.Name, pp.Requirement, py)
				}
			}
		}
		if p.FlashAttnWheel != nil && p.FlashAttnBuild == nil && f.wheel(*p.FlashAttnWheel) == nil {
			t.Errorf("%s: no stand-in named %s, the wheel the plan picks", p.Name, *p.FlashAttnWheel)
		}
	}
}

// TestCatalogStandInsRealNames: file names and tags as PyTorch's index and
// PyPI serve them.
func TestCatalogStandInsRealNames(t *testing.T) {
	f := catalog(t)
	for _, fn := range []string{
		"torch-2.5.1+cu124-cp312-cp312-linux_x86_64.whl",
		"torch-2.5.1+cu118-cp311-cp311-linux_x86_64.whl",
		"torch-2.6.0+cu124-cp313-cp313-linux_x86_64.whl",
		"torch-2.7.1+cu128-cp313-cp313-manylinux_2_28_x86_64.whl",
		"torch-2.9.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
		"torch-2.11.0+cu128-cp310-cp310-manylinux_2_28_x86_64.whl",
		"torchvision-0.24.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
		"torchvision-0.26.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl",
		"nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux2014_x86_64.whl",
		"nvidia_cublas_cu12-12.8.4.1-py3-none-manylinux_2_27_x86_64.whl",
		"nvidia_cufft_cu11-10.9.0.58-py3-none-manylinux1_x86_64.whl",
		"triton-3.3.1-cp310-cp310-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
		"flash_attn-2.7.4.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl",
		"bitsandbytes-0.45.5-py3-none-manylinux_2_24_x86_64.whl",
	} {
		if f.wheel(fn) == nil {
			t.Errorf("no stand-in named %s", fn)
		}
	}
	if slices.ContainsFunc(f.wheels, func(w Wheel) bool { return strings.HasPrefix(w.Filename(), "torchvision-0.20.1+cu124-cp313") }) {
		t.Error("torchvision 0.20.1 has no cp313 wheels (torch.json: 3.9-3.12)")
	}
	// Every torch build: +cuXXX, and cu118/cu124 the plain linux tag, the
	// newer variants manylinux_2_28.
	for _, w := range f.wheels {
		if w.Name != "torch" && w.Name != "torchvision" && w.Name != "torchaudio" {
			continue
		}
		_, variant, ok := strings.Cut(w.Version, "+cu")
		plat := w.Tag[strings.LastIndex(w.Tag, "-")+1:]
		switch {
		case !ok:
			t.Errorf("%s: no +cuXXX local version", w.Filename())
		case variant == "118" || variant == "124":
			if plat != "linux_x86_64" {
				t.Errorf("%s: want linux_x86_64", w.Filename())
			}
		case plat != "manylinux_2_28_x86_64":
			t.Errorf("%s: want manylinux_2_28_x86_64", w.Filename())
		}
	}
}

// TestCatalogStandInsMetadata: torch's and torchvision's Requires-Dist.
func TestCatalogStandInsMetadata(t *testing.T) {
	f := catalog(t)
	w := f.wheel("torch-2.6.0+cu124-cp312-cp312-linux_x86_64.whl")
	if w == nil {
		t.Fatal("no torch 2.6.0+cu124")
	}
	// PyPI's torch 2.6.0 (the cu124 build), extras aside.
	m := `; platform_system == "Linux" and platform_machine == "x86_64"`
	want := []string{"filelock", "typing-extensions>=4.10.0", "networkx", "jinja2", "fsspec",
		"nvidia-cuda-nvrtc-cu12==12.4.127" + m, "nvidia-cuda-runtime-cu12==12.4.127" + m, "nvidia-cuda-cupti-cu12==12.4.127" + m,
		"nvidia-cudnn-cu12==9.1.0.70" + m, "nvidia-cublas-cu12==12.4.5.8" + m, "nvidia-cufft-cu12==11.2.1.3" + m,
		"nvidia-curand-cu12==10.3.5.147" + m, "nvidia-cusolver-cu12==11.6.1.9" + m, "nvidia-cusparse-cu12==12.3.1.170" + m,
		"nvidia-cusparselt-cu12==0.6.2" + m, "nvidia-nccl-cu12==2.21.5" + m, "nvidia-nvtx-cu12==12.4.127" + m,
		"nvidia-nvjitlink-cu12==12.4.127" + m, "triton==3.2.0" + m,
		`setuptools; python_version >= "3.12"`, `sympy==1.13.1; python_version >= "3.9"`}
	got := requiresDist(t, *w)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("torch 2.6.0+cu124 Requires-Dist:\n got %q\nwant %q", got, want)
	}
	if w := f.wheel("torch-2.5.1+cu124-cp312-cp312-linux_x86_64.whl"); w == nil || !slices.Contains(requiresDist(t, *w), `triton==3.1.0; platform_system == "Linux" and platform_machine == "x86_64" and python_version < "3.13"`) {
		t.Error(`torch 2.5.1+cu124 should pin triton==3.1.0 for python_version < "3.13"`)
	}
	if w := f.wheel("torchvision-0.26.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl"); w == nil || !slices.Equal(requiresDist(t, *w), []string{"numpy", "torch==2.11.0", "pillow!=8.3.*,>=5.3.0"}) {
		t.Error("torchvision 0.26.0 should pin torch==2.11.0 exactly, without the local tag")
	}
	// Every torch pins its cuDNN as kiln's data says.
	for _, p := range f.plans {
		if p.Torch == nil {
			continue
		}
		tv := torchRelease(f.db, *p.Torch)
		var cudnn string
		for _, v := range tv.Variants {
			if v.Name == *p.TorchCUDAVariant {
				cudnn = v.CuDNN
			}
		}
		w := f.find(p.Pip[0], p.Python)
		if w == nil || w.Name != "torch" {
			t.Fatalf("%s: no torch for %s", p.Name, p.Python)
		}
		if !slices.ContainsFunc(requiresDist(t, *w), func(r string) bool {
			return strings.HasPrefix(r, "nvidia-cudnn-cu") && strings.Contains(r, "=="+cudnn+";")
		}) {
			t.Errorf("%s: torch %s does not pin cuDNN %s", p.Name, w.Version, cudnn)
		}
	}
}

// TestCatalogStandInsServeTheirDependencies: whatever a stand-in requires
// is served, every == pin at its version; every stand-in says it is one.
func TestCatalogStandInsServeTheirDependencies(t *testing.T) {
	f := catalog(t)
	served := map[string][]string{}
	for _, w := range f.wheels {
		served[Normalize(w.Name)] = append(served[Normalize(w.Name)], w.Version)
	}
	for _, w := range f.wheels {
		files := wheelFiles(t, w)
		if !slices.ContainsFunc(slices.Collect(maps.Values(files)), func(c string) bool { return strings.Contains(c, "KILN_STANDIN = True") }) {
			t.Errorf("%s: no KILN_STANDIN marker", w.Filename())
		}
		for _, r := range requiresDist(t, w) {
			n := reqName(r)
			vs, ok := served[n]
			if !ok {
				t.Errorf("%s requires %q: %s is not served", w.Filename(), r, n)
				continue
			}
			spec, _, _ := strings.Cut(r, ";")
			// PEP 440: ==2.7.1 matches 2.7.1+cu128.
			if _, v, ok := strings.Cut(spec, "=="); ok && !strings.ContainsAny(v, "*,") && !slices.ContainsFunc(vs, func(s string) bool { return s == v || strings.HasPrefix(s, v+"+") }) {
				t.Errorf("%s requires %q: %s is served at %v", w.Filename(), r, n, vs)
			}
		}
	}
}

func TestCatalogIndexDeterministic(t *testing.T) {
	a, err := CatalogIndex()
	if err != nil {
		t.Fatal(err)
	}
	b, err := CatalogIndex()
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() {
		t.Errorf("two builds of the catalog index differ: %s, %s", a.Digest(), b.Digest())
	}
}

// pipPlatforms are the tags pip download accepts for an x86_64 Linux
// target (pip 23 does not widen manylinux_2_28 to the older glibc tags).
var pipPlatforms = []string{"manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"}

// havePip skips the test unless python3 -m pip runs; it returns python3's
// real executable and its version (3.11).
func havePip(t *testing.T) (string, string) {
	t.Helper()
	// Real pip in a subprocess, tens of seconds: the e2e tier's, not the
	// fast tier's. The full Python matrix is make catalog's (KILN_CATALOG=all).
	testdaemon.SkipShort(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	out, err := exec.Command("python3", "-c", "import sys, pip; print(sys.executable); print('%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		t.Skip("python3 has no pip")
	}
	exe, ver, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return exe, ver
}

// pythonFor is a python with pip of version py: python3 when it is one,
// else pythonX.Y from PATH when that runs pip, else python3 (exact false).
func pythonFor(py, host, hostExe string) (string, bool) {
	if py == host {
		return hostExe, true
	}
	if out, err := exec.Command("python"+py, "-c", "import sys, pip; print(sys.executable)").Output(); err == nil {
		return strings.TrimSpace(string(out)), true
	}
	return hostExe, false
}

func pipEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PIP_") && !strings.HasPrefix(e, "PYTHON") {
			env = append(env, e)
		}
	}
	return append(env, "PIP_CONFIG_FILE="+os.DevNull, "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PYTHONNOUSERSITE=1")
}

// pip runs python -m pip ARGS against the index at url for CPython py.
func pip(t *testing.T, python, verb, url, py string, args ...string) {
	t.Helper()
	a := []string{"-m", "pip", verb, "--no-cache-dir", "--only-binary=:all:", "--python-version", py, "--implementation", "cp", "--abi", cpTag(py), "--index-url", url}
	for _, p := range pipPlatforms {
		a = append(a, "--platform", p)
	}
	cmd := exec.Command(python, append(a, args...)...)
	cmd.Env = pipEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip %s: %v\n%s", verb, err, out)
	}
}

func serveCatalog(t *testing.T) string {
	t.Helper()
	ix, err := CatalogIndex()
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := Serve(ix, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// TestCatalogPipDownload: real pip resolves each catalog recipe's pip
// list from the stand-in index alone (for the recipe's Python; every
// CPython of the stack without -short), and fetches the wheels the recipe
// pins and torch's pinned dependencies. A source-built FlashAttention's
// sdist is on its project page.
func TestCatalogPipDownload(t *testing.T) {
	hostExe, host := havePip(t)
	f := catalog(t)
	url := serveCatalog(t)
	for _, p := range f.plans {
		pys := []string{p.Python}
		if os.Getenv("KILN_CATALOG") == "all" {
			pys = planPythons(f.db, p)
		}
		for _, py := range pys {
			t.Run(p.Name+"/"+py, func(t *testing.T) {
				python, exact := pythonFor(py, host, hostExe)
				var reqs, want []string
				for _, pp := range p.Pip {
					if sourceBuilt(p, pp) {
						v, _ := pp.Version()
						resp, err := http.Get(url + "/" + Normalize(pp.Name) + "/")
						if err != nil {
							t.Fatal(err)
						}
						page, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if fn := FlashAttnSDist(v).Filename(); !strings.Contains(string(page), fn) {
							t.Errorf("%s's page lacks %s", pp.Name, fn)
						}
						continue
					}
					reqs = append(reqs, pp.Requirement)
					w := f.find(pp, py)
					if w == nil {
						t.Fatalf("no stand-in for %s", pp.Requirement)
					}
					fn := w.Filename()
					if pp.Name == "flash-attn" && p.FlashAttnWheel != nil {
						// The very wheel the plan names, on this CPython: two
						// recipes' builds of one release would clash here.
						cp := func(py string) string { return "-" + cpTag(py) + "-" + cpTag(py) + "-" }
						fn = strings.Replace(*p.FlashAttnWheel, cp(p.Python), cp(py), 1)
					}
					want = append(want, fn)
					if w.Name != "torch" {
						continue
					}
					for _, r := range requiresDist(t, *w) {
						spec, marker, _ := strings.Cut(r, "; ")
						if !exact && strings.Contains(spec, "==") && markerHolds(t, marker, py) != markerHolds(t, marker, host) {
							// pip --python-version still evaluates markers
							// for the Python that runs it.
							t.Skipf("no python%s with pip, and pip on %s would evaluate %q for %s", py, host, r, host)
						}
						name, v, ok := strings.Cut(spec, "==")
						if ok && !strings.ContainsAny(name, "[") && markerHolds(t, marker, py) {
							want = append(want, strings.ReplaceAll(name, "-", "_")+"-"+v+"-")
						}
					}
				}
				dir := t.TempDir()
				pip(t, python, "download", url, py, append([]string{"-d", dir}, reqs...)...)
				ents, _ := os.ReadDir(dir)
				var got []string
				for _, e := range ents {
					got = append(got, e.Name())
				}
				for _, w := range want {
					if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
						t.Errorf("pip download did not fetch %s; got %q", w, got)
					}
				}
				if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, "numpy-") }) && slices.ContainsFunc(reqs, func(r string) bool { return strings.HasPrefix(r, "torchvision") }) {
					t.Errorf("torchvision's numpy not fetched: %q", got)
				}
			})
		}
	}
}

// TestCatalogStandInsAnswerRecipeTests installs each recipe's stand-ins
// with pip install --target for the recipe's Python (pythonX.Y on PATH;
// else python3's) and runs the recipe's own test lines, and a few checks
// of torch, with that python against them. Lines the stand-ins cannot
// answer are skipped: loading a shared library, importing a package the
// recipe compiles from source, asserting the recipe's Python on another.
func TestCatalogStandInsAnswerRecipeTests(t *testing.T) {
	hostExe, host := havePip(t)
	f := catalog(t)
	url := serveCatalog(t)
	ran := 0
	for _, p := range f.plans {
		// The recipe's own Python when this host has it with pip, else python3's.
		python, exact := pythonFor(p.Python, host, hostExe)
		py := p.Python
		if !exact {
			py = host
		}
		if !slices.Contains(planPythons(f.db, p), py) {
			t.Logf("%s: no stand-ins for CPython %s", p.Name, py)
			continue
		}
		if os.Getenv("KILN_CATALOG") != "all" && !exact && p.Name != recipes.DefaultRecipe {
			// Unless make catalog: the recipes whose Python the host has, and the default one.
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			bin := t.TempDir()
			for _, n := range []string{"python", "python3"} {
				if err := os.Symlink(python, filepath.Join(bin, n)); err != nil {
					t.Fatal(err)
				}
			}
			var reqs []string
			compiled := map[string]bool{}
			for _, pp := range p.Pip {
				if sourceBuilt(p, pp) {
					compiled[strings.ReplaceAll(Normalize(pp.Name), "-", "_")] = true
					continue
				}
				reqs = append(reqs, pp.Requirement)
			}
			target := t.TempDir()
			pip(t, python, "install", url, py, append([]string{"--target", target}, reqs...)...)
			run := func(line string) {
				t.Helper()
				cmd := exec.Command("sh", "-c", line)
				cmd.Env = append(pipEnv(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "PYTHONPATH="+target)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s: %v\n%s", line, err, out)
				}
			}
			if p.Torch != nil {
				var cudaVer string
				for _, v := range torchRelease(f.db, *p.Torch).Variants {
					if v.Name == *p.TorchCUDAVariant {
						cudaVer = v.CUDA
					}
				}
				run(`python3 -c "import torch, torch.backends.cudnn as c; assert torch.KILN_STANDIN; ` +
					`assert torch.__version__ == '` + *p.Torch + "+" + *p.TorchCUDAVariant + `', torch.__version__; ` +
					`assert torch.version.cuda == '` + cudaVer + `', torch.version.cuda; ` +
					`assert torch.cuda.is_available() is False and torch.cuda.get_arch_list() == []; ` +
					`assert 'sm_80' in torch._C._cuda_getArchFlags().split(); assert c.version() >= 90000"`)
				if p.Torchvision != nil {
					run(`python3 -c "import torchvision; assert torchvision.__version__ == '` + *p.Torchvision + "+" + *p.TorchCUDAVariant + `', torchvision.__version__"`)
				}
			}
			for _, line := range p.Test {
				skip := ""
				switch {
				case !strings.HasPrefix(line, "python"):
					skip = "not a python line"
				case strings.Contains(line, "ctypes.CDLL"):
					skip = "loads a shared library"
				case strings.Contains(line, "sys.version") && p.Python != py:
					skip = "asserts the recipe's Python " + p.Python
				}
				for pkg := range compiled {
					if strings.Contains(line, pkg) {
						skip = pkg + " is compiled from source"
					}
				}
				if skip != "" {
					t.Logf("skip %q: %s", line, skip)
					continue
				}
				run(line)
				ran++
			}
		})
	}
	if ran == 0 {
		t.Error("no recipe test line ran")
	}
}
