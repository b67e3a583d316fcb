package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/builder/internal/wheelserve"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/recipes"
)

// catalogPython is the Python a catalog recipe is built with here when
// the stand-in Python download has no interpreter of the version it
// names: the stand-ins are real CPythons from Debian's packages (3.13 and
// 3.11), and offline there is no real 3.10 or 3.12; such a recipe is
// built as a copy naming 3.13 (the only change).
const catalogPython = "3.13"

var pythonLine = regexp.MustCompile(`(?m)^python: *"?[0-9.]+"?\s*$`)

// standInNvccMax is the newest GPU architecture the stand-in devel bases'
// nvcc compiles for: whatever CUDA their tag names, it is Debian's 12.4.1
// (sm_90 at most). A recipe that compiles for a newer GPU (FlashAttention
// from source for sm_100) is built as a copy whose gpus are the ones nvcc
// 12.4 knows (catalogGPUs); the only change, named in the test's log.
const standInNvccMax = 9.0

// catalogGPUs are the gpus such a copy names.
const catalogGPUs = "[h100]"

var gpusLine = regexp.MustCompile(`(?m)^gpus: *\[[^\]]*\]\s*$`)

// compilesBeyondNvcc says whether p compiles GPU code for an architecture
// the stand-in nvcc does not know.
func compilesBeyondNvcc(p *recipes.Plan) bool {
	if p.FlashAttnBuild == nil {
		return false
	}
	for _, a := range p.CUDAArchs {
		if v, err := strconv.ParseFloat(a, 64); err == nil && v > standInNvccMax {
			return true
		}
	}
	return false
}

// TestCatalogRecipesOnStandIns (issue 38): the catalog's recipes build
// from an empty BuildKit through the stand-ins alone — NVIDIA's images
// under their real names in the registry mirror (fixtures), PyTorch's and
// PyPI's pins in one wheel index, the Python download through a Python
// mirror — and pass their own test lines, with python, python3 and pip
// the recipe's Python. KILN_CATALOG=all (make catalog) builds every
// recipe, KILN_CATALOG=NAME,NAME the ones named; unset, it skips (the
// default recipe builds in TestQuickstartGoInstalled). The offline stack
// (debian13-cu124) has its own e2e tests.
func TestCatalogRecipesOnStandIns(t *testing.T) {
	if os.Getenv("KILN_CATALOG") == "" {
		t.Skip("make catalog (KILN_CATALOG=all or NAME,NAME) builds the catalog's recipes; the default one builds in TestQuickstartGoInstalled")
	}
	c, reg := buildkitEnv(t, "12.8.1-devel-ubuntu24.04", "12.8.1-base-ubuntu24.04")
	pyMirror, pySHAs, _ := pythonMirror(t)
	minors := standInMinors(pySHAs)
	idx := catalogIndex(t)
	// GPU-code pruning runs kiln in the image (gpu_code: prune).
	tools := goInstalledKiln(t)
	testdaemon.PruneAfter(t, true)

	var names []string
	switch sel := os.Getenv("KILN_CATALOG"); sel {
	case "all":
		entries, err := recipes.Catalog()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name != recipes.OfflineRecipe {
				names = append(names, e.Name)
			}
		}
	default:
		names = strings.Split(sel, ",")
	}
	for _, recipe := range names {
		t.Run(recipe, func(t *testing.T) {
			src, err := recipes.CatalogRecipe(recipe)
			if err != nil {
				t.Fatal(err)
			}
			copyNote := ""
			if m := pythonLine.Find(src); m != nil && !slices.ContainsFunc(minors, func(v string) bool { return strings.Contains(string(m), `"`+v+`"`) }) {
				copyNote = fmt.Sprintf(" (a copy naming Python %s; the recipe names %s)", catalogPython, strings.TrimSpace(string(m)))
				src = pythonLine.ReplaceAll(src, []byte(`python: "`+catalogPython+`"`))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			resolve := func() (*recipes.Recipe, *recipes.Plan) {
				t.Helper()
				r, err := recipes.Parse(recipe+".yaml", src)
				if err != nil {
					t.Fatal(err)
				}
				p, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg), recipes.WithWheelIndexes(idx), recipes.WithPythonMirror(pyMirror))
				if err != nil {
					t.Fatal(err)
				}
				return r, p
			}
			r, p := resolve()
			if compilesBeyondNvcc(p) && gpusLine.Match(src) {
				copyNote += fmt.Sprintf(" (a copy naming gpus %s: it compiles for CUDA archs %s, and the stand-in nvcc is 12.4's)", catalogGPUs, strings.Join(p.CUDAArchs, ","))
				src = gpusLine.ReplaceAll(src, []byte("gpus: "+catalogGPUs))
				r, p = resolve()
			}
			if p.PythonSource == recipes.PythonStandalone {
				standInSHA(t, p, pySHAs)
			}
			p.Platforms = []string{"linux/amd64"}
			// What every image must answer, beside the recipe's own lines.
			p.Test = append(p.Test,
				`python -c 'import sys; assert sys.version_info[:2] == (`+strings.Replace(p.Python, ".", ", ", 1)+`), sys.version; print(sys.version)'`,
				`test "$(readlink -f "$(command -v python3)")" = "$(readlink -f "$(command -v python)")"`,
				`pip --version | grep -F "(python `+p.Python+`)"`,
				`pip list`,
			)
			// Each recipe from an empty BuildKit, as a new machine builds it.
			pruneAll(t, c)
			// The app a recipe ships (app.files): a main.py in each source
			// directory, and its entrypoint run as the image would run it.
			appDir := t.TempDir()
			if p.App != nil {
				for _, f := range p.App.Files {
					if err := os.MkdirAll(filepath.Join(appDir, f.Src), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(appDir, f.Src, "main.py"), []byte("import sys\nprint('app ok on', sys.version)\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if len(p.App.Entrypoint) > 0 && p.App.Workdir != "" {
					p.Test = append(p.Test, "cd "+p.App.Workdir+" && "+strings.Join(append(slices.Clone(p.App.Entrypoint), p.App.Cmd...), " ")+" | grep -F 'app ok'")
				}
			}
			epoch := int64(1700000000)
			in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
			ref := fmt.Sprintf("%s/kiln-test/catalog-%s:%d", reg, recipe, time.Now().UnixNano())
			start := time.Now()
			res, err := Build(ctx, p, in, Options{Client: c, ContextDir: appDir, Progress: progressMode(), Tools: tools, Outputs: []Output{mustOutput(t, ref)}})
			if err != nil {
				t.Fatalf("build of %s%s: %v", recipe, copyNote, err)
			}
			took := time.Since(start)
			size := pushedSize(t, ref)
			t.Logf("%s%s: built in %s, %d MB compressed, %s (python from %s)", recipe, copyNote, took.Round(time.Second), size>>20, res.Digest, p.PythonSource)
			if os.Getenv("KILN_CATALOG_NAIVE") != "1" {
				return
			}
			// What a single-stage Dockerfile ships, at best: the same stack
			// on the devel base, by kiln's own steps (so without the pip
			// cache and apt lists a careless one leaves), without the
			// runtime base and without GPU-code pruning. From an empty
			// BuildKit too (make catalog: KILN_CATALOG_NAIVE=1).
			naive := *p
			naive.BaseImages.Runtime = naive.BaseImages.Devel
			naive.RuntimeFlavor = "devel"
			naive.GPUCode = nil
			pruneAll(t, c)
			nref := fmt.Sprintf("%s/kiln-test/catalog-%s-naive:%d", reg, recipe, time.Now().UnixNano())
			start = time.Now()
			if _, err := Build(ctx, &naive, in, Options{Client: c, ContextDir: appDir, Progress: progressMode(), Tools: tools, Outputs: []Output{mustOutput(t, nref)}}); err != nil {
				t.Fatalf("build of %s on the devel base %s alone: %v", recipe, naive.BaseImages.Devel, err)
			}
			ntook, nsize := time.Since(start), pushedSize(t, nref)
			t.Logf("%s on the devel base %s alone: built in %s, %d MB compressed; kiln's image is %.2fx smaller, built in %.2fx the time", recipe, naive.BaseImages.Devel, ntook.Round(time.Second), nsize>>20, float64(nsize)/float64(size), took.Seconds()/ntook.Seconds())
		})
	}
}

// pushedSize is the compressed size of ref's image's layers, as pushed
// (what a pull moves).
func pushedSize(t *testing.T, ref string) int64 {
	t.Helper()
	img, err := testkit.OpenImage(context.Background(), ref)
	if err != nil {
		t.Fatalf("%s: %v", ref, err)
	}
	defer img.Close()
	return img.CompressedSize()
}

// catalogIndex serves the stand-in of PyTorch's and PyPI's indexes with
// every catalog recipe's pins (wheelserve.CatalogIndex) until the test
// ends, and returns its URL.
func catalogIndex(t *testing.T) string {
	t.Helper()
	ix, err := wheelserve.CatalogIndex()
	if err != nil {
		t.Fatal(err)
	}
	// Debian's real setuptools, wheel and packaging (fixtures: python/wheels) in
	// place of the stand-ins: a recipe's source build runs them.
	real := filepath.Join(filepath.Dir(fixtureWheels(t)), "python", "wheels")
	ix.Remove("setuptools")
	ix.Remove("wheel")
	ix.Remove("packaging")
	if err := ix.AddDir(real); err != nil {
		t.Fatalf("%v (bash scripts/fixtures.sh python)", err)
	}
	idx, stop, err := wheelserve.Serve(ix, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return idx
}

// progressMode is the catalog builds' progress: quiet, or
// KILN_TEST_PROGRESS's (plain shows each step's output).
func progressMode() ProgressMode {
	if p, err := ParseProgress(os.Getenv("KILN_TEST_PROGRESS")); err == nil && p != ProgressAuto {
		return p
	}
	return ProgressQuiet
}

// goInstalledKiln is the kiln a user gets from go install: cgo on, so
// dynamically linked against this host's glibc, which an image's own C
// library must not matter to when that kiln prunes GPU code inside it
// (issue 38: such a kiln used to be refused).
func goInstalledKiln(t *testing.T) string {
	t.Helper()
	kiln := testdaemon.KilnBinaryGoInstall(t)
	if interp, _, err := dynamicDeps(kiln); err != nil || interp == "" {
		t.Fatalf("a kiln built with cgo on is not dynamically linked here (interpreter %q, %v): this test is to build with the kiln go install gives", interp, err)
	}
	return kiln
}
