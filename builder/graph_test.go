package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	controlapi "github.com/moby/buildkit/api/services/control"
	"github.com/moby/buildkit/solver/pb"
	ocispecs "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
)

const testIndex = "http://127.0.0.1:9999/simple"

func testPlan(t *testing.T, mutate func(*recipes.Recipe)) *recipes.Plan {
	t.Helper()
	return catalogPlan(t, mutate, recipes.WithMirror("127.0.0.1:5000"), recipes.WithWheelIndexes(testIndex))
}

// catalogPlan resolves the debian-cuda11.8 catalog recipe, changed by
// mutate, with opts.
func catalogPlan(t *testing.T, mutate func(*recipes.Recipe), opts ...recipes.ResolveOption) *recipes.Plan {
	t.Helper()
	b, err := recipes.CatalogRecipe("debian-cuda11.8")
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
	p, err := recipes.Resolve(context.Background(), r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var amd64 = ocispecs.Platform{OS: "linux", Architecture: "amd64"}

type decoded struct {
	sources []string
	execs   []*pb.ExecOp
	files   []*pb.FileOp
}

func decode(t *testing.T, p *recipes.Plan, in Inputs, probe bool) (*decoded, string) {
	t.Helper()
	g, err := NewGraph(p, in, amd64)
	if err != nil {
		t.Fatal(err)
	}
	st := g.Runtime
	if probe {
		st = g.Probe
	}
	def, err := g.Marshal(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	d := &decoded{}
	for _, dt := range def.Def {
		var op pb.Op
		if err := op.UnmarshalVT(dt); err != nil {
			t.Fatal(err)
		}
		if s := op.GetSource(); s != nil {
			d.sources = append(d.sources, s.Identifier)
		}
		if e := op.GetExec(); e != nil {
			d.execs = append(d.execs, e)
		}
		if f := op.GetFile(); f != nil {
			d.files = append(d.files, f)
		}
	}
	return d, DefinitionDigest(def)
}

func TestGraphOps(t *testing.T) {
	p := testPlan(t, nil)
	d, _ := decode(t, p, Inputs{RecipeHash: "sha256:abc"}, false)

	for _, want := range []string{"docker-image://127.0.0.1:5000/nvidia/cuda:11.8.0-devel-debian12", "docker-image://127.0.0.1:5000/nvidia/cuda:11.8.0-runtime-debian12"} {
		if !slices.Contains(d.sources, want) {
			t.Errorf("sources %v lack %s", d.sources, want)
		}
	}
	if !slices.Contains(d.sources, "local://"+ContextName) {
		t.Errorf("sources %v lack the local context", d.sources)
	}

	var fetches, installs, aptRuns int
	for _, e := range d.execs {
		cmd := strings.Join(e.Meta.Args, " ")
		env := e.Meta.Env
		if !slices.Contains(env, "PATH="+DefaultPath) {
			t.Errorf("%q: env %v lacks PATH", cmd, env)
		}
		if !slices.Contains(env, "PIP_BREAK_SYSTEM_PACKAGES=1") {
			t.Errorf("%q: env lacks PIP_BREAK_SYSTEM_PACKAGES", cmd)
		}
		mounts := map[string]*pb.Mount{}
		for _, m := range e.Mounts {
			mounts[m.Dest] = m
		}
		switch {
		case strings.Contains(cmd, "pip download"):
			fetches++
			m := mounts["/root/.cache/pip"]
			if m == nil || m.MountType != pb.MountType_CACHE || m.CacheOpt.ID != "kiln-pip-cache" {
				t.Errorf("%q: no pip cache mount: %v", cmd, m)
			}
			if e.Network != pb.NetMode_HOST {
				t.Errorf("%q: fetch not on the host network", cmd)
			}
			if !strings.Contains(cmd, "--index-url "+testIndex) || !strings.Contains(cmd, "--trusted-host 127.0.0.1") {
				t.Errorf("%q: index flags", cmd)
			}
		case strings.Contains(cmd, "pip install --no-index"):
			installs++
			m := mounts["/wheelhouse"]
			if m == nil || !m.Readonly || m.Selector != "/wheelhouse" || m.MountType != pb.MountType_BIND || m.Input < 0 {
				t.Errorf("%q: wheelhouse is not a read-only bind mount from devel: %v", cmd, m)
			}
			if e.Network == pb.NetMode_HOST {
				t.Errorf("%q: install from the wheelhouse needs no network", cmd)
			}
		case strings.Contains(cmd, "apt-get"):
			aptRuns++
			for _, dir := range []string{"/var/cache/apt", "/var/lib/apt/lists"} {
				if m := mounts[dir]; m == nil || m.MountType != pb.MountType_CACHE || m.CacheOpt.Sharing != pb.CacheSharingOpt_LOCKED {
					t.Errorf("%q: no locked cache mount at %s", cmd, dir)
				}
			}
		}
	}
	// torch and extensions groups: one fetch and one runtime layer each.
	if fetches != 2 || installs != 2 {
		t.Errorf("fetches=%d installs=%d, want 2 and 2", fetches, installs)
	}
	if aptRuns != 2 {
		t.Errorf("apt runs=%d, want devel and runtime", aptRuns)
	}
	// The app is copied last, from the context, in one op that then makes
	// the workdir (as a Dockerfile's WORKDIR does); no wheel is ever copied.
	if len(d.files) != 1 {
		t.Fatalf("file ops=%d, want 1 (app)", len(d.files))
	}
	for _, a := range d.files[0].Actions {
		if m := a.GetMkdir(); m != nil {
			if m.Path != "/app" || !m.MakeParents {
				t.Errorf("app op makes %v", m)
			}
			continue
		}
		c := a.GetCopy()
		if c == nil {
			t.Errorf("app op has another action %v", a)
			continue
		}
		if strings.Contains(c.Src, "wheel") || c.Dest != "/app" {
			t.Errorf("copy %s -> %s", c.Src, c.Dest)
		}
	}
}

func TestLayoutComponents(t *testing.T) {
	p := testPlan(t, func(r *recipes.Recipe) {
		r.Pip = []string{"numpy==2.1.0"}
		r.Apt = []string{"libgomp1"}
	})
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	var comps []Component
	for _, s := range L.Runtime.Steps {
		comps = append(comps, s.Component)
	}
	want := []Component{ComponentSystem, ComponentTorch, ComponentExtensions, ComponentPip, ComponentApp}
	if !slices.Equal(comps, want) {
		t.Errorf("runtime layers %v, want %v", comps, want)
	}
	if !strings.Contains(L.Runtime.Steps[0].Shell, "libgomp1") {
		t.Errorf("apt extras missing: %s", L.Runtime.Steps[0].Shell)
	}
	if !strings.Contains(L.Runtime.Steps[3].Shell, "numpy==2.1.0") {
		t.Errorf("pip extras missing: %s", L.Runtime.Steps[3].Shell)
	}
	// The runtime install of extensions sees torch's wheelhouse too.
	if s := L.Runtime.Steps[2].Shell; !strings.Contains(s, "/wheelhouse/torch") || !strings.Contains(s, "/wheelhouse/extensions") {
		t.Errorf("extensions install: %s", s)
	}
}

func TestDeterminism(t *testing.T) {
	in := Inputs{RecipeHash: "sha256:abc"}
	_, d1 := decode(t, testPlan(t, nil), in, false)
	_, d2 := decode(t, testPlan(t, nil), in, false)
	if d1 != d2 {
		t.Fatalf("same plan, different digests %s %s", d1, d2)
	}
	// Changing a pip extra changes the graph; the app contents never do (they
	// are content-addressed by BuildKit at solve time, not in the definition).
	_, d3 := decode(t, testPlan(t, func(r *recipes.Recipe) { r.Pip = []string{"einops==0.8.0"} }), in, false)
	if d3 == d1 {
		t.Fatal("a different plan gave the same digest")
	}
	// The probe graph extends the runtime graph.
	_, dp := decode(t, testPlan(t, nil), in, true)
	if dp == d1 {
		t.Fatal("probes did not change the graph")
	}
}

func TestProbes(t *testing.T) {
	p := testPlan(t, func(r *recipes.Recipe) {
		r.Test = []string{`python3 -c "import torch"`, "true"}
	})
	d, _ := decode(t, p, Inputs{}, true)
	var probes []string
	for _, e := range d.execs {
		if len(e.Meta.Args) == 3 && (e.Meta.Args[2] == `python3 -c "import torch"` || e.Meta.Args[2] == "true") {
			probes = append(probes, e.Meta.Args[2])
			if e.Meta.Cwd != "/app" {
				t.Errorf("probe cwd %q, want /app", e.Meta.Cwd)
			}
		}
	}
	if len(probes) != 2 {
		t.Errorf("probes %v", probes)
	}
}

func TestFlashAttnFromSource(t *testing.T) {
	p := testPlan(t, nil)
	p.FlashAttnBuild = &recipes.FABuild{CUDAArchs: "80;90", MaxJobs: 2, NvccThreads: 2, Env: map[string]string{"FLASH_ATTENTION_FORCE_BUILD": "TRUE"},
		PipFlags: []string{"--no-build-isolation", "--no-binary", "flash-attn"}}
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range L.Devel.Steps {
		if strings.Contains(s.Shell, "pip wheel --no-deps --no-build-isolation") {
			found = true
			for _, want := range []string{"FLASH_ATTN_CUDA_ARCHS='80;90'", "MAX_JOBS=2", "NVCC_THREADS=2", "FLASH_ATTENTION_FORCE_BUILD=TRUE", "pip install --no-index --find-links /wheelhouse/torch", "--no-binary flash-attn --wheel-dir /wheelhouse/extensions"} {
				if !strings.Contains(s.Shell, want) {
					t.Errorf("source build lacks %q: %s", want, s.Shell)
				}
			}
			if n := strings.Count(s.Shell, "--no-build-isolation"); n != 1 {
				t.Errorf("--no-build-isolation %d times: %s", n, s.Shell)
			}
			if strings.Contains(s.Shell, "download --only-binary=:all: --dest /wheelhouse/extensions --index-url http://127.0.0.1:9999/simple --trusted-host 127.0.0.1 'flash-attn") {
				t.Errorf("flash-attn fetched as a wheel too: %s", s.Shell)
			}
		}
	}
	if !found {
		t.Error("no source build step")
	}
	// The build backend (setuptools, wheel) comes from Debian, installed
	// even when the base already has pip.
	for _, want := range []string{"build-essential", "python3-setuptools", "python3-wheel", "python3-dev"} {
		if !strings.Contains(L.Devel.Steps[0].Shell, want) {
			t.Errorf("devel toolchain lacks %s: %s", want, L.Devel.Steps[0].Shell)
		}
	}
	if strings.HasPrefix(L.Devel.Steps[0].Shell, "if ") {
		t.Errorf("devel toolchain skipped when pip is present: %s", L.Devel.Steps[0].Shell)
	}
}

func TestImageConfig(t *testing.T) {
	p := testPlan(t, nil)
	epoch := int64(1700000000)
	base, _ := json.Marshal(ocispecs.Image{Config: ocispecs.ImageConfig{Env: []string{"PATH=/bin", "CUDA_VERSION=11.8.0", "LD_LIBRARY_PATH=/usr/lib/x"}, Labels: map[string]string{"base": "1"}}})
	img, err := ImageConfig(p, Inputs{RecipeHash: "sha256:r", LockDigest: "sha256:l", SourceDateEpoch: &epoch}, amd64, base)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range img.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["PATH"] != DefaultPath || !strings.HasPrefix(env["LD_LIBRARY_PATH"], DefaultLDLibraryPath) || !strings.Contains(env["LD_LIBRARY_PATH"], "/usr/lib/x") {
		t.Errorf("env %v", env)
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != "all" || env["NVIDIA_DRIVER_CAPABILITIES"] != "compute,utility" {
		t.Errorf("env %v", env)
	}
	if !strings.HasPrefix(env["NVIDIA_REQUIRE_CUDA"], "cuda>=11.8") {
		t.Errorf("NVIDIA_REQUIRE_CUDA=%q", env["NVIDIA_REQUIRE_CUDA"])
	}
	lb := img.Config.Labels
	if lb[layers.LabelRecipeHash] != "sha256:r" || lb[layers.LabelLockDigest] != "sha256:l" || lb[layers.LabelMinDriver] != p.MinDriver.Toolkit || lb[layers.LabelCUDAArchs] != "8.0" || lb["base"] != "1" {
		t.Errorf("labels %v", lb)
	}
	if !slices.Equal(img.Config.Entrypoint, []string{"python3", "main.py"}) || img.Config.WorkingDir != "/app" {
		t.Errorf("entrypoint %v workdir %q", img.Config.Entrypoint, img.Config.WorkingDir)
	}
	if img.Created == nil || img.Created.Unix() != epoch {
		t.Errorf("created %v", img.Created)
	}
}

func TestDockerfile(t *testing.T) {
	p := testPlan(t, nil)
	df, err := Dockerfile(p, Inputs{RecipeHash: "sha256:r"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"FROM 127.0.0.1:5000/nvidia/cuda:11.8.0-devel-debian12 AS devel",
		"FROM 127.0.0.1:5000/nvidia/cuda:11.8.0-runtime-debian12 AS runtime",
		"--mount=type=bind,from=devel,source=/wheelhouse,target=/wheelhouse",
		"--mount=type=cache,id=kiln-pip-cache,target=/root/.cache/pip",
		"RUN --network=host",
		`COPY ["app","/app"]`,
		`ENTRYPOINT ["python3","main.py"]`,
		"NVIDIA_REQUIRE_CUDA=",
		layers.LabelRecipeHash,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, df)
		}
	}
}

func TestParseCacheSpec(t *testing.T) {
	c, err := ParseCacheSpec("127.0.0.1:5000/cache:kiln", true)
	if err != nil || c.Type != "registry" || c.Attrs["mode"] != "max" || c.Attrs["compression"] != "zstd" || c.Attrs["registry.insecure"] != "true" {
		t.Errorf("%+v %v", c, err)
	}
	c, err = ParseCacheSpec("local:/tmp/c", false)
	if err != nil || c.Type != "local" || c.Attrs["src"] != "/tmp/c" {
		t.Errorf("%+v %v", c, err)
	}
	c, err = ParseCacheSpec("type=local,dest=/tmp/c", true)
	if err != nil || c.Attrs["dest"] != "/tmp/c" || c.Attrs["mode"] != "max" {
		t.Errorf("%+v %v", c, err)
	}
	for _, bad := range []string{"", "type=s3,bucket=x", "type=registry", "type=local", "type=registry,nokv"} {
		if _, err := ParseCacheSpec(bad, true); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestConnectNoDaemon(t *testing.T) {
	_, _, err := Connect(context.Background(), "unix:///nonexistent/buildkitd.sock", TLS{})
	if !errors.Is(err, ErrNoDaemon) || !strings.Contains(err.Error(), "buildkitd") || strings.Contains(err.Error(), "scripts/") {
		t.Fatalf("err = %v", err)
	}
	// The buildx builder most Docker users already run comes before
	// BuildKit's own daemon; no hint names this repository's scripts, which
	// a go install user does not have.
	if i := strings.Index(err.Error(), "docker-container://buildx_buildkit_default"); i < 0 || i > strings.Index(err.Error(), "BuildKit's own daemon") {
		t.Errorf("the hint does not name the buildx builder first: %v", err)
	}
}

// fakeBuildKit serves the one call Connect makes (ListWorkers) on a unix
// socket, so a fallback to it would succeed.
func fakeBuildKit(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kbk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "b.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	controlapi.RegisterControlServer(srv, fakeControl{})
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

type fakeControl struct {
	controlapi.UnimplementedControlServer
}

func (fakeControl) ListWorkers(context.Context, *controlapi.ListWorkersRequest) (*controlapi.ListWorkersResponse, error) {
	return &controlapi.ListWorkersResponse{}, nil
}

// TestConnectNamedAddressNoFallback: a $BUILDKIT_HOST or --builder whose
// socket is missing fails naming it, though a default socket answers (F15).
func TestConnectNamedAddressNoFallback(t *testing.T) {
	def := fakeBuildKit(t)
	old := DefaultSockets
	DefaultSockets = []string{def}
	t.Cleanup(func() { DefaultSockets = old })
	ctx := context.Background()
	// Unset, the default answers.
	t.Setenv("BUILDKIT_HOST", "")
	c, got, err := Connect(ctx, "", TLS{})
	if err != nil || got != def {
		t.Fatalf("default socket: %q %v", got, err)
	}
	c.Close()
	missing := "unix:///nonexistent/kiln-test/buildkitd.sock"
	for _, tc := range []struct{ env, flag, name string }{
		{env: missing, name: "$BUILDKIT_HOST=" + missing},
		{flag: missing, name: "--builder " + missing},
	} {
		t.Setenv("BUILDKIT_HOST", tc.env)
		c, got, err := Connect(ctx, tc.flag, TLS{})
		if err == nil {
			c.Close()
			t.Fatalf("%s: connected to %s instead of failing", tc.name, got)
		}
		if !errors.Is(err, ErrNoDaemon) || !strings.Contains(err.Error(), tc.name) || strings.Contains(err.Error(), def) {
			t.Errorf("%s: error %q: want it to name %q and not try %s", tc.name, err, tc.name, def)
		}
	}
}

// TestDefaultRecipeShipsCUDAOnce: the offline recipe (torch cu124 wheels on
// an nvidia/cuda 12.4.1 -base image, whose cudart is the same 12.4) leaves
// the nvidia-cuda-runtime wheel out in the step that installs torch; a
// -runtime base, or a base of another CUDA minor, keeps it. The system step
// drops apt/dpkg logs (wall-clock times) and a source-built extension links
// with --strip-all (nvcc's pid-named temp files in .symtab): both broke
// "two builds from an empty cache, one digest".
func TestDefaultRecipeShipsCUDAOnce(t *testing.T) {
	b, err := recipes.CatalogRecipe(recipes.OfflineRecipe)
	if err != nil {
		t.Fatal(err)
	}
	r, err := recipes.Parse("kiln.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := recipes.Resolve(context.Background(), r, recipes.WithMirror("127.0.0.1:5000"), recipes.WithWheelIndexes(testIndex))
	if err != nil {
		t.Fatal(err)
	}
	torchStep := func(p *recipes.Plan) (string, *Layout) {
		L, err := Lower(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range L.Runtime.Steps {
			if s.Component == ComponentTorch {
				return s.Shell, L
			}
		}
		t.Fatal("no torch step")
		return "", nil
	}
	sh, L := torchStep(p)
	if !strings.Contains(sh, "&& python3 -m pip uninstall -y -q nvidia-cuda-runtime-cu12 &&") {
		t.Errorf("-base with the same cudart: torch step %q does not drop the wheel's copy", sh)
	}
	if !strings.Contains(L.Runtime.Steps[0].Shell, rmBuildLogs) {
		t.Errorf("system step keeps apt/dpkg logs: %s", L.Runtime.Steps[0].Shell)
	}
	var fa bool
	for _, s := range L.Devel.Steps {
		if strings.Contains(s.Shell, "pip wheel") {
			fa = strings.Contains(s.Shell, "LDFLAGS=-Wl,--strip-all ")
		}
	}
	if !fa {
		t.Error("the FlashAttention source build does not link with --strip-all")
	}
	for name, change := range map[string]func(*recipes.Plan){
		"runtime base":  func(p *recipes.Plan) { p.RuntimeFlavor = "runtime" },
		"other minor":   func(p *recipes.Plan) { p.CUDA = "12.6.3" },
		"no torch cuda": func(p *recipes.Plan) { p.TorchCUDAVariant = nil },
	} {
		q := *p
		change(&q)
		if sh, _ := torchStep(&q); strings.Contains(sh, "uninstall") {
			t.Errorf("%s: %q drops the CUDA runtime wheel", name, sh)
		}
	}
}

// The recipe's gpus prune the GPU code of what the torch and extensions
// steps install, in those steps, with the kiln-tools mount; gpu_code.prune:
// false (or no gpus) keeps it all and needs no tools.
func TestGPUCodePruneSteps(t *testing.T) {
	base := func(extra string) *recipes.Plan {
		r, err := recipes.Parse("kiln.yaml", []byte("name: t\ncuda: \"12.4\"\nos: debian13\npython: \"3.13\"\ntorch: {version: 2.6.0}\nbitsandbytes: {version: 0.45.5}\ngpus: [h100, l4]\n"+extra))
		if err != nil {
			t.Fatal(err)
		}
		p, err := recipes.Resolve(context.Background(), r, recipes.WithMirror("127.0.0.1:5000"), recipes.WithWheelIndexes(testIndex))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := base("")
	if p.GPUCode == nil || strings.Join(p.GPUCode.Archs, ",") != "sm_89,sm_90" || !p.GPUCode.KeepPTX || p.GPUCode.NVIDIALibs {
		t.Fatalf("plan gpu_code %+v", p.GPUCode)
	}
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	if !L.NeedsTools() {
		t.Fatal("no step mounts the kiln tools")
	}
	pruned := map[Component]bool{}
	for _, s := range L.Runtime.Steps {
		if strings.Contains(s.Shell, "/kiln-tools/kiln fatbin prune --gpus sm_89,sm_90 $(") {
			pruned[s.Component] = true
		}
	}
	if !pruned[ComponentTorch] || !pruned[ComponentExtensions] || pruned[ComponentPip] || pruned[ComponentSystem] {
		t.Errorf("pruning steps %v", pruned)
	}
	df, err := Dockerfile(p, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(df, "--mount=type=bind,from=kiln-tools,target=/kiln-tools") || !strings.Contains(df, "--build-context kiln-tools=DIR") {
		t.Errorf("Dockerfile lacks the tools mount:\n%s", df)
	}
	p = base("gpu_code: {keep_ptx: false, nvidia_libs: true}\n")
	L, _ = Lower(p)
	var sh string
	for _, s := range L.Runtime.Steps {
		if s.Component == ComponentTorch {
			sh = s.Shell
		}
	}
	if !strings.Contains(sh, "--keep-ptx=false --prune-nvidia-libs") {
		t.Errorf("torch step %q", sh)
	}
	p = base("gpu_code: {prune: false}\n")
	if L, _ := Lower(p); p.GPUCode != nil || L.NeedsTools() {
		t.Errorf("gpu_code.prune: false still prunes: %+v", p.GPUCode)
	}
	if _, _, err := toolsDir(""); err == nil || !strings.Contains(err.Error(), "no kiln executable") {
		t.Errorf("toolsDir without a binary: %v", err)
	}
	exe, _ := os.Executable()
	if _, done, err := toolsDir(exe); err != nil && !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("toolsDir(test binary): %v", err)
	} else if err == nil {
		done()
	}
}

// A kiln installed as the README says (go install, cgo on) is dynamically
// linked: the pruning steps run it through its own C library, bundled
// from the build host beside a /bin/sh launcher, instead of refusing the
// build (issue 38). The launcher runs it with no library of the host's
// search path: only the bundle.
func TestToolsDirBundlesDynamicKiln(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler: cannot build a cgo binary")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module cgohello\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\n// #include <stdio.h>\n// static void hi(void) { puts(\"hello from cgo\"); fflush(stdout); }\nimport \"C\"\nimport (\"fmt\"; \"os\")\n\nfunc main() { C.hi(); fmt.Println(os.Args[1:]) }\n"), 0o644)
	exe := filepath.Join(dir, "kiln-dyn")
	cmd := exec.Command("go", "build", "-o", exe, ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tools, done, err := toolsDir(exe)
	if err != nil {
		t.Fatalf("a dynamically linked kiln: %v", err)
	}
	defer done()
	for _, f := range []string{ToolsBinary, ToolsBundle + "/kiln", ToolsBundle + "/ld.so", ToolsBundle + "/lib/libc.so.6"} {
		if _, err := os.Stat(filepath.Join(tools, f)); err != nil {
			t.Errorf("bundle: %v", err)
		}
	}
	run := exec.Command(filepath.Join(tools, ToolsBinary), "fatbin", "prune")
	run.Env = []string{"PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=/nonexistent"}
	out, err := run.CombinedOutput()
	if err != nil || string(out) != "hello from cgo\n[fatbin prune]\n" {
		t.Fatalf("the launcher: %v\n%s", err, out)
	}
	// A static kiln is the file itself.
	self, _ := os.Executable()
	if st, _, err := dynamicDeps(self); err == nil && st == "" {
		tools, done, err := toolsDir(self)
		if err != nil {
			t.Fatal(err)
		}
		defer done()
		if _, err := os.Stat(filepath.Join(tools, ToolsBundle)); !os.IsNotExist(err) {
			t.Errorf("a static kiln got a bundle: %v", err)
		}
	}
}

// Each kiln binary a user ran leaves a tools directory (~40 MB for a
// dynamic kiln); sweepTools removes the ones unused for toolsIdle, the
// most recently used toolsKeep aside and the current one always.
func TestSweepToolsKeepsRecentlyUsed(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-2 * toolsIdle)
	mk := func(name string, used time.Time, marker bool) {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, ToolsBinary), []byte("x"), 0o755)
		if marker {
			markToolsUsed(d)
			os.Chtimes(d+".used", used, used)
		} else {
			os.Chtimes(d, used, used)
		}
	}
	mk("current", old.Add(-time.Hour), true)
	mk("recent", time.Now(), true)
	for i := 0; i < 6; i++ {
		mk(fmt.Sprintf("old%d", i), old.Add(-time.Duration(i)*time.Minute), i%2 == 0)
	}
	sweepTools(root, "current")
	var left []string
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{"current", "current.used", "old0", "old0.used", "old1", "recent", "recent.used"}
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}
