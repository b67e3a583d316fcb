package builder

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/solver/pb"
	ocispecs "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/recipes"
)

// namedPlan resolves a catalog recipe as a user would (no mirror, no
// index), changed by mutate.
func namedPlan(t *testing.T, name string, mutate func(*recipes.Recipe)) *recipes.Plan {
	t.Helper()
	b, err := recipes.CatalogRecipe(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := recipes.Parse("kiln.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(r)
	}
	p, err := recipes.Resolve(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The default recipe's runtime stage makes python, python3 and pip run
// the recipe's Python (issue 38: nvidia/cuda:12.8.1-base-ubuntu24.04 has
// no Python, apt's python3 gives no python, and the test line
// `python -c "import torch; ..."` failed with "python: not found").
func TestDefaultRecipeRuntimeHasPython(t *testing.T) {
	p := namedPlan(t, recipes.DefaultRecipe, nil)
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []Stage{L.Devel, L.Runtime} {
		sh := st.Steps[0].Shell
		for _, want := range []string{
			"apt-get install -y -qq --no-install-recommends python3 python3-pip",
			`ln -sf "$py" /usr/local/bin/python;`,
			"> /usr/local/bin/pip;",
			"ln -sf pip /usr/local/bin/pip3",
			`for c in python python3; do "$c" -c `,
			" 3.12 \"$c\" " + st.Name + " ",
			"grep -qF '(python 3.12)'",
		} {
			if !strings.Contains(sh, want) {
				t.Errorf("%s: %s lacks %q:\n%s", st.Name, st.Steps[0].Name, want, sh)
			}
		}
		if !strings.HasPrefix(sh, "set -e; ") {
			t.Errorf("%s: a failure in %s is not the step's: %s", st.Name, st.Steps[0].Name, sh)
		}
	}
	// The probes run on a runtime whose first layer made the links.
	d, _ := decode(t, p, Inputs{}, true)
	var linked, probed bool
	for _, e := range d.execs {
		cmd := strings.Join(e.Meta.Args, " ")
		if strings.Contains(cmd, `ln -sf "$py" /usr/local/bin/python;`) && strings.Contains(cmd, "python3 python3-pip") {
			linked = true
		}
		if strings.HasPrefix(cmd, "/bin/sh -c python -c") {
			probed = true
			if !linked {
				t.Errorf("probe %q runs before python is linked", cmd)
			}
		}
	}
	if !linked || !probed {
		t.Errorf("linked %v probed %v", linked, probed)
	}
	if !strings.HasPrefix(p.Test[0], "python -c") {
		t.Errorf("the default recipe's test no longer calls python: %q", p.Test[0])
	}
}

// torch25-cu124 names Python 3.11 on Ubuntu 22.04 (3.10): both stages
// unpack the pinned CPython 3.11 that BuildKit downloads and checks, the
// OS's python3 is not installed, and the check runs before any wheel is
// fetched.
func TestStandalonePythonSteps(t *testing.T) {
	p := namedPlan(t, "torch25-cu124", nil)
	a := p.PythonDist.Archives[0]
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []Stage{L.Devel, L.Runtime} {
		step := st.Steps[0]
		if strings.Contains(step.Shell, "python3-pip") || !strings.Contains(step.Shell, "tar -xzf /kiln-python/cpython.tar.gz -C /opt") {
			t.Errorf("%s: %s", st.Name, step.Shell)
		}
		for _, want := range []string{"ln -sf /opt/python/bin/python3 /usr/local/bin/python3", "ln -sf /opt/python/bin/python3.11 /usr/local/bin/python3.11", " 3.11 \"$c\" " + st.Name + " "} {
			if !strings.Contains(step.Shell, want) {
				t.Errorf("%s lacks %q: %s", st.Name, want, step.Shell)
			}
		}
		i := slices.IndexFunc(step.Mounts, func(m Mount) bool { return m.Kind == MountDownload })
		if i < 0 {
			t.Fatalf("%s: no download mount: %+v", st.Name, step.Mounts)
		}
		if f, ok := step.Mounts[i].Download.For("linux/amd64"); !ok || f.URL != a.URL || f.SHA256 != a.SHA256 {
			t.Errorf("%s: download %+v", st.Name, step.Mounts[i].Download)
		}
	}
	// The devel stage needs no network for it; the runtime's apt (git) does.
	if L.Devel.Steps[0].HostNetwork || !L.Runtime.Steps[0].HostNetwork || !strings.Contains(L.Runtime.Steps[0].Shell, "apt-get install -y -qq --no-install-recommends git") {
		t.Errorf("network: devel %v runtime %v: %s", L.Devel.Steps[0].HostNetwork, L.Runtime.Steps[0].HostNetwork, L.Runtime.Steps[0].Shell)
	}
	for i, s := range L.Devel.Steps {
		if strings.Contains(s.Shell, "pip download") && i == 0 {
			t.Errorf("a wheel is fetched before the Python check")
		}
	}

	// LLB: an HTTP source pinned by the sha256.
	g, err := NewGraph(p, Inputs{}, amd64)
	if err != nil {
		t.Fatal(err)
	}
	def, err := g.Marshal(context.Background(), g.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, dt := range def.Def {
		var op pb.Op
		if err := op.UnmarshalVT(dt); err != nil {
			t.Fatal(err)
		}
		if s := op.GetSource(); s != nil && s.Identifier == a.URL {
			found = true
			if s.Attrs[pb.AttrHTTPChecksum] != "sha256:"+a.SHA256 || s.Attrs[pb.AttrHTTPFilename] != "cpython.tar.gz" {
				t.Errorf("http source attrs %v", s.Attrs)
			}
		}
	}
	if !found {
		t.Errorf("no http source for %s", a.URL)
	}
	// A platform the plan has no archive for is refused in words.
	if _, err := NewGraph(p, Inputs{}, ocispecs.Platform{OS: "linux", Architecture: "arm64"}); err == nil || !strings.Contains(err.Error(), "no CPython 3.11.16 (python-build-standalone 20260814) download for linux/arm64") {
		t.Errorf("arm64: %v", err)
	}

	// The Dockerfile: an ADD --checksum stage, bind-mounted where LLB mounts it.
	df, err := Dockerfile(p, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"FROM scratch AS python-dist\nADD --checksum=sha256:" + a.SHA256 + " " + a.URL + " /cpython.tar.gz\n",
		"--mount=type=bind,from=python-dist,target=/kiln-python set -e; mkdir -p /opt",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, df)
		}
	}
	if strings.Index(df, "AS python-dist") > strings.Index(df, "AS devel") {
		t.Errorf("the download stage comes after the stage that mounts it:\n%s", df)
	}
	res, err := parser.Parse(strings.NewReader(df))
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	var add *instructions.AddCommand
	for _, st := range stages {
		for _, c := range st.Commands {
			if c, ok := c.(*instructions.AddCommand); ok && st.Name == "python-dist" {
				add = c
			}
		}
	}
	if add == nil || add.Checksum != "sha256:"+a.SHA256 || !slices.Equal(add.SourcePaths, []string{a.URL}) {
		t.Errorf("BuildKit reads the ADD as %+v", add)
	}
	if m := readDockerfile(t, df); m.runs["devel"] != len(L.Devel.Steps) || m.runs["runtime"] != len(L.Runtime.Steps)-1 || m.runs["python-dist"] != 0 {
		t.Errorf("RUN instructions per stage %v", m.runs)
	}

	// Several platforms: a stage per architecture, TARGETARCH's mounted.
	p.PythonDist.Archives = append(p.PythonDist.Archives, recipes.PythonArchive{Platform: "linux/arm64", File: "arm.tar.gz", URL: "https://example.com/arm.tar.gz", SHA256: strings.Repeat("a", 64)})
	p.Platforms = []string{"linux/amd64", "linux/arm64"}
	df, err = Dockerfile(p, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FROM scratch AS python-dist-amd64\n", "FROM scratch AS python-dist-arm64\nADD --checksum=sha256:" + strings.Repeat("a", 64) + " https://example.com/arm.tar.gz /cpython.tar.gz\n", "FROM python-dist-${TARGETARCH} AS python-dist\n"} {
		if !strings.Contains(df, want) {
			t.Errorf("multi-platform Dockerfile lacks %q:\n%s", want, df)
		}
	}
	if _, err := NewGraph(p, Inputs{}, ocispecs.Platform{OS: "linux", Architecture: "arm64"}); err != nil {
		t.Error(err)
	}
}

// The shell kiln generates, run here on a stand-in of the relocatable
// archive (an interpreter under python/bin, as python-build-standalone
// lays it out) with the image's paths moved into a temporary root:
// python, python3, python3.X and pip then run that interpreter, and a
// version other than the recipe's fails the step in words.
func TestPythonShellRuns(t *testing.T) {
	host, err := exec.Command("python3", "-c", "import sys; print(sys.executable); print('%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		t.Skipf("no python3 here: %v", err)
	}
	exe, ver, _ := strings.Cut(strings.TrimSpace(string(host)), "\n")
	if exec.Command(exe, "-m", "pip", "--version").Run() != nil {
		t.Skip("the host's python3 has no pip")
	}
	root := t.TempDir()
	archive := filepath.Join(root, "kiln-python", "cpython.tar.gz")
	writeStandIn(t, archive, exe, ver)

	p := namedPlan(t, "torch25-cu124", nil)
	p.Python = ver
	moved := strings.NewReplacer(PythonTarget, filepath.Join(root, "kiln-python"), "/opt", filepath.Join(root, "opt"), "/usr/local/bin", filepath.Join(root, "usr/local/bin"))
	run := func(sh string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", moved.Replace(sh))
		cmd.Env = []string{"PATH=" + filepath.Join(root, "usr/local/bin") + ":/usr/bin:/bin", "HOME=" + root, "PYTHONDONTWRITEBYTECODE=1", "PIP_DISABLE_PIP_VERSION_CHECK=1"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	sh := strings.Join([]string{"set -e", unpackPython, pythonLinks(p), pythonCheck(p, "devel")}, "; ")
	if out, err := run(sh); err != nil {
		t.Fatalf("%v: %s\n%s", err, out, sh)
	}
	for _, c := range []string{"python", "python3", "python" + ver} {
		out, err := run(c + ` -c 'import sys; print("%d.%d" % sys.version_info[:2])'`)
		if err != nil || strings.TrimSpace(out) != ver {
			t.Errorf("%s: %q %v", c, out, err)
		}
	}
	for _, c := range []string{"pip", "pip3"} {
		if out, err := run(c + " --version"); err != nil || !strings.Contains(out, "(python "+ver+")") {
			t.Errorf("%s --version: %q %v", c, out, err)
		}
	}
	// The recipe names another version: the step fails, saying which.
	p.Python = "3.1"
	out, err := run(pythonCheck(p, "runtime"))
	if err == nil || !strings.Contains(out, "kiln: the recipe names Python 3.1, but python in the runtime stage runs Python "+ver) || !strings.Contains(out, "python-build-standalone archive of CPython 3.11.16") {
		t.Errorf("mismatch: %v %s", err, out)
	}
	// Nothing provides python: the step fails too.
	if out, err := run("PATH=/nonexistent; " + pythonCheck(p, "devel")); err == nil {
		t.Errorf("no python: %s", out)
	}
}

// writeStandIn writes a gzipped tar laid out as python-build-standalone's
// install_only archives: python/bin/python3 (here a link to the host's
// interpreter), python/bin/python3.X -> python3.
func writeStandIn(t *testing.T, file, exe, ver string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, h := range []*tar.Header{
		{Name: "python/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "python/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "python/bin/python3", Typeflag: tar.TypeSymlink, Linkname: exe, Mode: 0o777},
		{Name: "python/bin/python" + ver, Typeflag: tar.TypeSymlink, Linkname: "python3", Mode: 0o777},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A plan read from a lock file reaches shell lines and the Dockerfile:
// Python values a resolve would not write are refused.
func TestLowerRefusesOddPythonValues(t *testing.T) {
	for name, mutate := range map[string]func(*recipes.Plan){
		"python":  func(p *recipes.Plan) { p.Python = "3.11; rm -rf /" },
		"url":     func(p *recipes.Plan) { p.PythonDist.Archives[0].URL = "https://x/a b.tar.gz" },
		"sha256":  func(p *recipes.Plan) { p.PythonDist.Archives[0].SHA256 = "abc" },
		"version": func(p *recipes.Plan) { p.PythonDist.Version = "3.12.1" },
		"no dist": func(p *recipes.Plan) { p.PythonDist = nil },
	} {
		p := namedPlan(t, "torch25-cu124", nil)
		mutate(p)
		if _, err := Lower(p); err == nil {
			t.Errorf("%s: lowered", name)
		}
	}
}

// A source build on a relocatable Python gets the toolchain from apt, the
// build backend through pip, and the system's compiler in place of the
// one python-build-standalone's sysconfig names.
func TestStandalonePythonSourceBuild(t *testing.T) {
	p := namedPlan(t, "torch25-cu124", func(r *recipes.Recipe) { r.FlashAttn.Build = "source" })
	if p.PythonSource != recipes.PythonStandalone || len(p.Compiled()) == 0 {
		t.Fatalf("python %s compiled %v", p.PythonSource, p.Compiled())
	}
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	sh := L.Devel.Steps[0].Shell
	for _, want := range []string{"tar -xzf /kiln-python/cpython.tar.gz", "--no-install-recommends build-essential ninja-build git", "python3 -c 'import setuptools, wheel, packaging' 2>/dev/null || python3 -m pip install", "setuptools wheel packaging"} {
		if !strings.Contains(sh, want) {
			t.Errorf("devel python step lacks %q: %s", want, sh)
		}
	}
	if strings.Contains(sh, "python3-dev") || !L.Devel.Steps[0].HostNetwork {
		t.Errorf("devel python step: network %v: %s", L.Devel.Steps[0].HostNetwork, sh)
	}
	var compiled bool
	for _, s := range L.Devel.Steps {
		if s.Compile != nil {
			compiled = true
			if !strings.Contains(s.Shell, "CC=cc CXX=c++ LDSHARED='cc -shared' LDCXXSHARED='c++ -shared' ") {
				t.Errorf("compile step: %s", s.Shell)
			}
		}
	}
	if !compiled {
		t.Error("no compile step")
	}
}
