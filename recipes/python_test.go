package recipes

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func pyPlan(t *testing.T, name string, mutate func(*Recipe), opts ...ResolveOption) (*Plan, error) {
	t.Helper()
	b, err := CatalogRecipe(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse("kiln.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(r)
	}
	return Resolve(context.Background(), r, opts...)
}

// The Python a recipe names is the Python the image runs: the OS's
// python3 where the OS ships that version, else a pinned relocatable
// CPython (issue 38: torch25-cu124 names 3.11 on Ubuntu 22.04, which
// ships 3.10, and the builder installed 3.10).
func TestResolvePythonProvider(t *testing.T) {
	for _, tc := range []struct {
		recipe, python, source string
	}{
		{DefaultRecipe, "3.12", PythonOS},
		{"torch213-cu130", "3.12", PythonOS},
		{"debian13-cu124", "3.13", PythonOS},
		{"debian-cuda11.8", "3.11", PythonOS},
		{"torch25-cu124", "3.11", PythonStandalone},
	} {
		p, err := pyPlan(t, tc.recipe, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.recipe, err)
		}
		if p.Python != tc.python || p.PythonSource != tc.source {
			t.Errorf("%s: python %s from %q, want %s from %q", tc.recipe, p.Python, p.PythonSource, tc.python, tc.source)
		}
		if (p.PythonDist != nil) != (tc.source == PythonStandalone) {
			t.Errorf("%s: python_dist %+v with source %s", tc.recipe, p.PythonDist, p.PythonSource)
		}
		for _, w := range p.Warnings {
			if strings.Contains(w, "must install Python") {
				t.Errorf("%s: %s", tc.recipe, w)
			}
		}
	}
	p, err := pyPlan(t, "torch25-cu124", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := p.PythonDist
	want := PythonArchive{
		Platform: "linux/amd64",
		File:     "cpython-3.11.16+20260814-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz",
		URL:      "https://github.com/astral-sh/python-build-standalone/releases/download/20260814/cpython-3.11.16%2B20260814-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz",
		SHA256:   "3b437f08720d3ddd9c1904532476ec9fb373e800d1598c72c907dd6d5f29b79b",
	}
	if d.Version != "3.11.16" || d.Release != "20260814" || len(d.Archives) != 1 || d.Archives[0] != want {
		t.Errorf("python_dist %+v, want 3.11.16 20260814 %+v", d, want)
	}
	if a, ok := d.Archive("linux/amd64/v3"); !ok || a != want {
		t.Errorf("Archive(linux/amd64/v3) = %+v %v", a, ok)
	}
	// Both architectures python-build-standalone builds for glibc.
	p, err = pyPlan(t, "torch25-cu124", func(r *Recipe) {
		r.Platforms = []string{"linux/amd64", "linux/arm64"}
		r.FlashAttn = nil
		r.BitsAndBytes = nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := p.PythonDist.Archive("linux/arm64"); !ok || !strings.Contains(a.URL, "aarch64-unknown-linux-gnu") || len(a.SHA256) != 64 {
		t.Errorf("arm64 archive %+v %v", a, ok)
	}
}

// Every pinned build has a real sha256 for both glibc triples, and its
// version is the one its row names.
func TestPythonData(t *testing.T) {
	db := mustDB()
	if err := db.Python.validate(); err != nil {
		t.Errorf("python.json: %v", err)
	}
	if db.Python.DownloadURL != "https://github.com/astral-sh/python-build-standalone/releases/download" || db.Python.Archive == "" {
		t.Errorf("download_url %q archive %q", db.Python.DownloadURL, db.Python.Archive)
	}
	hex := regexp.MustCompile(`^[0-9a-f]{64}$`)
	seen := map[string]bool{}
	for _, b := range db.PythonBuilds() {
		mm := b.Version[:strings.LastIndex(b.Version, ".")]
		if seen[mm] {
			t.Errorf("two builds of Python %s", mm)
		}
		seen[mm] = true
		if !regexp.MustCompile(`^\d{8}$`).MatchString(b.Release) {
			t.Errorf("%s: release %q", b.Version, b.Release)
		}
		for _, triple := range []string{"x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"} {
			if !hex.MatchString(b.SHA256[triple]) {
				t.Errorf("%s %s: sha256 %q", b.Version, triple, b.SHA256[triple])
			}
		}
	}
	for _, mm := range []string{"3.10", "3.11", "3.12", "3.13"} {
		if !seen[mm] {
			t.Errorf("no build of Python %s: every version the catalog's bases ship must be providable elsewhere", mm)
		}
	}
}

// A Python kiln cannot provide is refused by resolve (and so by lock),
// with try: lines, never left for pip to discover.
func TestResolveRefusesPythonItCannotProvide(t *testing.T) {
	_, err := pyPlan(t, "torch25-cu124", func(r *Recipe) {
		r.CUDA = "12.1"
		r.Torch.Version = "2.2.2"
		r.Python = "3.8"
		r.FlashAttn, r.BitsAndBytes = nil, nil
	})
	var re *ResolveError
	if !errors.As(err, &re) {
		t.Fatalf("err %v, want a refusal", err)
	}
	if re.Field != "python" || !strings.Contains(re.Reason, "kiln cannot provide Python 3.8 on ubuntu22.04: the OS ships Python 3.10") {
		t.Errorf("refusal %q: %q", re.Field, re.Reason)
	}
	for _, want := range []string{`python: "3.10" (the Python ubuntu22.04 ships)`, "os: ubuntu20.04 (ships Python 3.8)"} {
		if !slices.Contains(re.Alternatives, want) {
			t.Errorf("alternatives %q lack %q", re.Alternatives, want)
		}
	}
	if !strings.Contains(re.Error(), "; try: ") {
		t.Errorf("%v", re)
	}
	// A platform python-build-standalone has no glibc build for.
	_, err = pyPlan(t, "torch25-cu124", func(r *Recipe) {
		r.Platforms = []string{"linux/ppc64le"}
		r.FlashAttn, r.BitsAndBytes = nil, nil
	})
	if !errors.As(err, &re) || re.Field != "python" || !strings.Contains(re.Reason, "no Python 3.11 build for linux/ppc64le") || len(re.Alternatives) == 0 {
		t.Errorf("ppc64le: %v", err)
	}
	// The OS's own Python needs no build of kiln's.
	if p, err := pyPlan(t, "torch25-cu124", func(r *Recipe) {
		r.Python = "3.10"
		r.Platforms = []string{"linux/ppc64le"}
		r.FlashAttn, r.BitsAndBytes = nil, nil
	}); err != nil || p.PythonSource != PythonOS {
		t.Errorf("3.10 on ubuntu22.04/ppc64le: %v", err)
	}
}

// An unpinned Python is the newest one torch supports that kiln can put
// in the image.
func TestResolveUnpinnedPythonIsProvidable(t *testing.T) {
	p, err := pyPlan(t, "torch213-cu130", func(r *Recipe) { r.Python = "" })
	if err != nil {
		t.Fatal(err)
	}
	if p.PythonSource == "" || (p.PythonSource == PythonStandalone) != (p.PythonDist != nil) {
		t.Errorf("python %s source %q dist %+v", p.Python, p.PythonSource, p.PythonDist)
	}
}

// python_mirror, --python-mirror and $KILN_PYTHON_MIRROR replace the
// download prefix, as uv's UV_PYTHON_INSTALL_MIRROR does; the sha256 stays.
func TestPythonMirror(t *testing.T) {
	base, err := pyPlan(t, "torch25-cu124", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pyPlan(t, "torch25-cu124", func(r *Recipe) { r.PythonMirror = "https://mirror.example.com/pbs/" })
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.PythonDist.Archives[0], base.PythonDist.Archives[0]
	if a.URL != "https://mirror.example.com/pbs/20260814/cpython-3.11.16%2B20260814-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz" || a.SHA256 != b.SHA256 {
		t.Errorf("mirrored archive %+v", a)
	}
	p, err = pyPlan(t, "torch25-cu124", func(r *Recipe) { r.PythonMirror = "https://mirror.example.com/pbs" }, WithPythonMirror("http://127.0.0.1:8080"))
	if err != nil {
		t.Fatal(err)
	}
	if u := p.PythonDist.Archives[0].URL; !strings.HasPrefix(u, "http://127.0.0.1:8080/20260814/") {
		t.Errorf("the option does not override the recipe: %s", u)
	}
	t.Setenv(PythonMirrorEnv, "ftp://x")
	if _, err := PythonMirrorFromEnv(); err == nil || !strings.Contains(err.Error(), PythonMirrorEnv) {
		t.Errorf("env: %v", err)
	}
	b2, _ := CatalogRecipe("torch25-cu124")
	if _, err := Parse("kiln.yaml", append(b2, []byte("python_mirror: mirror.example.com\n")...)); err == nil || !strings.Contains(err.Error(), "python_mirror") {
		t.Errorf("a python_mirror without a scheme: %v", err)
	}
}

// resolve flags a test line or entrypoint that runs a program the image
// will not have, and only those.
func TestResolveWarnsOnMissingPrograms(t *testing.T) {
	p, err := pyPlan(t, "torch25-cu124", func(r *Recipe) {
		r.Test = []string{
			`python -c "import torch; print(1)"`,
			`python3 -c 'import sys' && pip list`,
			`pip3 --version; python3.11 -V | grep 3.11`,
			`test ! -e /wheelhouse && ! command -v nvcc`,
			`FOO=1 env BAR=2 torchrun --help`,
			`./serve.py --check`,
			`git --version`,
			`foo --bar`,
			`python -c "import x" | conda list`,
		}
		r.App.Entrypoint = []string{"/usr/bin/python", "serve.py"}
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range p.Warnings {
		if strings.Contains(w, "which the image will not have") {
			got = append(got, w)
		}
	}
	want := []string{"test[7] (foo --bar) runs foo,", "test[8] (python -c \"import x\" | conda list) runs conda,", "app.entrypoint runs /usr/bin/python,"}
	if len(got) != len(want) {
		t.Fatalf("warnings %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("warning %q, want it to start %q", got[i], w)
		}
	}
	if !strings.Contains(got[0], "python, python3, python3.11, pip, pip3 (Python 3.11)") {
		t.Errorf("the warning does not say what the image has: %s", got[0])
	}
	// The catalog's own tests and entrypoints call only what their images have.
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		p, err := pyPlan(t, e.Name, nil)
		if err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		for _, w := range p.Warnings {
			if strings.Contains(w, "which the image will not have") {
				t.Errorf("%s: %s", e.Name, w)
			}
		}
	}
}

func TestCommandWords(t *testing.T) {
	for line, want := range map[string][]string{
		`python -c "a; b && c | d"`:                 {"python"},
		`A=1 B='x y' exec python3 -V`:               {"python3"},
		`! command -v nvcc`:                         nil,
		`for x in 1 2; do pip list; done`:           {"for", "pip", "done"},
		`if [ -d /app ]; then ./run.sh; fi`:         {"[", "./run.sh", "fi"},
		`(cd /app && /app/serve --check) || exit 1`: {"cd", "/app/serve", "exit"},
		`bash -c 'foo'`:                             {"bash"},
		`echo "$HOME" \`:                            {"echo"},
	} {
		if got := commandWords(line); !slices.Equal(got, want) {
			t.Errorf("commandWords(%q) = %q, want %q", line, got, want)
		}
	}
}
