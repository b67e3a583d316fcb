package builder

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/builder/internal/wheelserve"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/moby/buildkit/client"
)

// e2eEnv returns a BuildKit client and the fixture registry, or skips (fails
// with KILN_REQUIRE_BUILDKIT=1) when either is missing.
func e2eEnv(t *testing.T) (*client.Client, string) {
	t.Helper()
	require := os.Getenv("KILN_REQUIRE_BUILDKIT") == "1"
	miss := func(format string, a ...any) {
		t.Helper()
		if require {
			t.Fatalf(format, a...)
		}
		t.Skipf(format+" (KILN_REQUIRE_BUILDKIT=1 makes this fail)", a...)
	}
	if testing.Short() && !require {
		t.Skip("end to end build in -short mode")
	}
	reg := os.Getenv("KILN_REGISTRY")
	if reg == "" {
		miss("KILN_REGISTRY not set (bash scripts/registry.sh start && bash scripts/fixtures.sh)")
	}
	for _, tag := range []string{"11.8.0-devel-debian12", "11.8.0-runtime-debian12"} {
		req, _ := http.NewRequest(http.MethodHead, "http://"+reg+"/v2/nvidia/cuda/manifests/"+tag, nil)
		req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if err != nil || resp.StatusCode != 200 {
			miss("fixture %s/nvidia/cuda:%s missing (bash scripts/fixtures.sh)", reg, tag)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := Connect(ctx, os.Getenv("KILN_BUILDKIT_HOST"), TLS{})
	if err != nil {
		miss("%v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, reg
}

const e2eRecipe = `name: kiln-e2e
cuda: 11.8.0
cudnn: none
os: debian12
python: "3.11"
torch:
  version: 2.5.1
flash_attn:
  version: 2.7.0.post2
  build: wheel
bitsandbytes:
  version: 0.45.5
gpus: [a100]
platforms: [linux/amd64]
app:
  files:
    - src: app
      dst: /app
  workdir: /app
  entrypoint: [python3, main.py]
test:
  - python3 -c "import torch, flash_attn, bitsandbytes; print(torch.__version__, flash_attn.__version__)"
  - test ! -e /wheelhouse && ! command -v nvcc
`

// e2eIndex serves the stand-in wheels and the flash_attn sdist as a PEP 503
// index until the test ends, and returns its URL.
func e2eIndex(t *testing.T) string {
	t.Helper()
	ix, err := wheelserve.NewIndex(wheelserve.StandIns(8)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.AddSDist(wheelserve.FlashAttnSDist(wheelserve.FlashAttnVersion)); err != nil {
		t.Fatal(err)
	}
	// A fixed port keeps the plan, and so BuildKit's cache keys, stable
	// across runs (the URL also names the index's contents, so a changed
	// stand-in is fetched and built again); fall back to any port.
	idx, stop, err := wheelserve.Serve(ix, "127.0.0.1:39517")
	if err != nil {
		idx, stop, err = wheelserve.Serve(ix, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(stop)
	return idx
}

// checkRuntimeRules checks img against testdata/rules/runtime.yaml: rules
// the runtime base itself breaks are the fixture's, not kiln's, so those are
// checked against the base and, for kiln's own layers, no layer may add a
// forbidden class. It returns the opened base.
func checkRuntimeRules(t *testing.T, ctx context.Context, img *layers.Image, runtimeBase string) *layers.Image {
	t.Helper()
	rep, err := analyze.Image(ctx, img, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := os.ReadFile(filepath.Join("..", "testdata", "rules", "runtime.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := analyze.ParseRules("runtime.yaml", rb)
	if err != nil {
		t.Fatal(err)
	}
	base, err := layers.Open(ctx, runtimeBase)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { base.Close() })
	baseRep, err := analyze.Image(ctx, base, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	baseBroken := map[string]bool{}
	for _, v := range rules.Check(baseRep) {
		baseBroken[v.Rule] = true
		t.Logf("the runtime base %s itself breaks %s: %s", runtimeBase, v.Rule, v.Message)
	}
	for _, v := range rules.Check(rep) {
		if baseBroken[v.Rule] {
			continue
		}
		t.Errorf("runtime rule broken: %s: %s", v.Rule, v.Message)
	}
	for _, l := range rep.Layers[len(base.Layers):] {
		for _, c := range []string{"dev_tools", "headers", "static_libs", "caches", "weights"} {
			if l.BytesByClass[c] > 0 {
				t.Errorf("kiln layer %d (%s) adds %d bytes of %s", l.Index, l.CreatedBy, l.BytesByClass[c], c)
			}
		}
	}
	return base
}

func TestEndToEnd(t *testing.T) {
	c, reg := e2eEnv(t)
	ctx := context.Background()

	idx := e2eIndex(t)

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "kiln.yaml"), []byte(e2eRecipe), 0o644)
	os.MkdirAll(filepath.Join(dir, "app"), 0o755)
	writeApp := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "app", "main.py"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeApp("print('hello from kiln')\n")
	r, err := recipes.Load(filepath.Join(dir, "kiln.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg), recipes.WithWheelIndexes(idx))
	if err != nil {
		t.Fatal(err)
	}
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	repo := fmt.Sprintf("%s/kiln-e2e/app", reg)
	build := func(tag string) *Result {
		t.Helper()
		start := time.Now()
		res, err := Build(ctx, plan, in, Options{
			Client: c, ContextDir: dir, Progress: "quiet",
			Outputs: []Output{{Type: "image", Path: repo + ":" + tag}},
		})
		if err != nil {
			t.Fatalf("build %s: %v", tag, err)
		}
		t.Logf("build %s: %s in %s, %d steps, %d cached, %d executed", tag, res.Digest, time.Since(start).Round(time.Millisecond), res.Status.Vertices, res.Status.Cached, res.Status.Executed)
		return res
	}

	r1 := build("v1")
	if r1.Digest == "" {
		t.Fatal("no digest")
	}

	// A rebuild executes nothing and gives the same digest.
	start := time.Now()
	r2 := build("v2")
	if r2.Digest != r1.Digest {
		t.Errorf("same inputs, different digests: %s vs %s", r1.Digest, r2.Digest)
	}
	if r2.Status.Executed != 0 {
		t.Errorf("no-op rebuild executed %d steps", r2.Status.Executed)
	}
	t.Logf("no-op rebuild: %s", time.Since(start).Round(time.Millisecond))

	// The runtime image carries no nvcc, headers, static libs or caches.
	img1, err := layers.Open(ctx, repo+"@"+r1.Digest)
	if err != nil {
		t.Fatal(err)
	}
	defer img1.Close()
	base := checkRuntimeRules(t, ctx, img1, plan.BaseImages.Runtime)
	if len(img1.Layers) != len(base.Layers)+4 {
		t.Errorf("%d layers on a %d-layer base, want system, torch, extensions, app", len(img1.Layers), len(base.Layers))
	}
	for i := range base.Layers {
		if img1.Layers[i].DiffID != base.Layers[i].DiffID {
			t.Errorf("base layer %d rewritten", i)
		}
	}
	env := strings.Join(img1.Config.Config.Env, "\n")
	for _, want := range []string{"NVIDIA_REQUIRE_CUDA=cuda>=11.8", "NVIDIA_VISIBLE_DEVICES=all", "LD_LIBRARY_PATH=" + DefaultLDLibraryPath} {
		if !strings.Contains(env, want) {
			t.Errorf("config env lacks %s:\n%s", want, env)
		}
	}
	if img1.Config.Config.Labels[LabelRecipeHash] != r.Hash() {
		t.Errorf("labels %v", img1.Config.Config.Labels)
	}
	for _, l := range img1.Layers[len(base.Layers):] {
		if !strings.Contains(string(l.MediaType), "zstd") {
			t.Errorf("layer %d is %s, want zstd", l.Index, l.MediaType)
		}
	}

	// An app-only change re-pushes only the app layer.
	writeApp("print('hello again')\n")
	r3 := build("v3")
	if r3.Digest == r1.Digest {
		t.Fatal("app change did not change the image")
	}
	img3, err := layers.Open(ctx, repo+"@"+r3.Digest)
	if err != nil {
		t.Fatal(err)
	}
	defer img3.Close()
	if len(img3.Layers) != len(img1.Layers) {
		t.Fatalf("layers %d vs %d", len(img3.Layers), len(img1.Layers))
	}
	var changed []int
	var pushed int64
	for i := range img1.Layers {
		if img1.Layers[i].Digest != img3.Layers[i].Digest {
			changed = append(changed, i)
			pushed += img3.Layers[i].Size
		}
	}
	if len(changed) != 1 || changed[0] != len(img1.Layers)-1 {
		t.Errorf("app change changed layers %v of %d, want only the last", changed, len(img1.Layers))
	}
	t.Logf("app-only change: %d new layer bytes of %d", pushed, img3.CompressedSize())

	// A failing probe fails the build.
	bad := *plan
	bad.Test = []string{"python3 -c 'import does_not_exist'"}
	if _, err := Build(ctx, &bad, in, Options{Client: c, ContextDir: dir, Progress: "quiet"}); err == nil {
		t.Error("a failing test: command did not fail the build")
	}
}

// The stand-in torch brings no CUDA libraries (real torch+cu118 wheels do,
// and would get -base): the compiled flash_attn needs the -runtime base's
// libcudart.so.11.0.
const e2eSourceRecipe = `name: kiln-e2e-fa-source
cuda: 11.8.0
cudnn: none
runtime_base: runtime
os: debian12
python: "3.11"
torch:
  version: 2.5.1
flash_attn:
  version: 2.7.0.post2
  build: source
gpus: [a100, h100]
platforms: [linux/amd64]
test:
  - python3 -c "import flash_attn, flash_attn.build_info as b; print(flash_attn.__version__, flash_attn.lib, flash_attn.cudart_build_version(), b.GENCODE)"
  - test ! -e /wheelhouse && ! command -v nvcc
`

// TestEndToEndFlashAttnSource builds FlashAttention from source: the
// stand-in sdist's setup.py compiles real .cu files with the devel fixture's
// nvcc for the recipe's GPUs (A100, H100: FLASH_ATTN_CUDA_ARCHS=80;90); the
// runtime image imports it, carries no compiler, headers or static libs, and
// its library holds an sm_80 and an sm_90 cubin of the kernels.
func TestEndToEndFlashAttnSource(t *testing.T) {
	c, reg := e2eEnv(t)
	ctx := context.Background()
	idx := e2eIndex(t)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kiln.yaml"), []byte(e2eSourceRecipe), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := recipes.Load(filepath.Join(dir, "kiln.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg), recipes.WithWheelIndexes(idx))
	if err != nil {
		t.Fatal(err)
	}
	if plan.FlashAttnBuild == nil || plan.FlashAttnBuild.CUDAArchs != "80;90" {
		t.Fatalf("flash_attn build %+v, want a source build for 80;90", plan.FlashAttnBuild)
	}
	if !strings.HasSuffix(plan.BaseImages.Runtime, "-runtime-debian12") {
		t.Fatalf("runtime base %s, want -runtime (libcudart)", plan.BaseImages.Runtime)
	}
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	ref := fmt.Sprintf("%s/kiln-e2e/fa-source:v1", reg)
	start := time.Now()
	res, err := Build(ctx, plan, in, Options{
		Client: c, ContextDir: dir, Progress: "quiet",
		Outputs: []Output{{Type: "image", Path: ref}},
	})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Logf("build: %s in %s, %d steps, %d cached, %d executed", res.Digest, time.Since(start).Round(time.Millisecond), res.Status.Vertices, res.Status.Cached, res.Status.Executed)

	img, err := layers.Open(ctx, ref+"@"+res.Digest)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	base := checkRuntimeRules(t, ctx, img, plan.BaseImages.Runtime)
	if len(img.Layers) != len(base.Layers)+3 {
		t.Errorf("%d layers on a %d-layer base, want system, torch, extensions", len(img.Layers), len(base.Layers))
	}

	// Find the compiled library in kiln's layers and read its fatbin.
	var so, info []byte
	var soPath string
	for _, l := range img.Layers[len(base.Layers):] {
		_, err := l.Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, body io.Reader) error {
			name := path.Base(e.Path)
			if !e.IsRegular() || path.Base(path.Dir(e.Path)) != "flash_attn" {
				return nil
			}
			var err error
			switch {
			case strings.HasPrefix(name, "flash_attn_cuda") && strings.HasSuffix(name, ".so"):
				so, err = io.ReadAll(body)
				soPath = e.Path
			case name == "build_info.py":
				info, err = io.ReadAll(body)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if so == nil {
		t.Fatal("no flash_attn/flash_attn_cuda*.so in the runtime image")
	}
	t.Logf("flash_attn/build_info.py:\n%s", info)
	if !strings.Contains(string(info), "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90") {
		t.Errorf("setup.py did not compile for 80;90: %s", info)
	}
	cubins, err := fatbinCubins(so)
	if err != nil {
		t.Fatalf("%s: %v", soPath, err)
	}
	var archs []int
	for a := range cubins {
		archs = append(archs, a)
	}
	slices.Sort(archs)
	for _, a := range archs {
		t.Logf("%s (%d bytes): sm_%d cubin, functions %v", soPath, len(so), a, cubins[a])
	}
	if !slices.Equal(archs, []int{80, 90}) {
		t.Errorf("%s holds cubins for %v, want sm_80 and sm_90", soPath, archs)
	}
	for _, a := range archs {
		if !slices.Contains(cubins[a], wheelserve.FlashAttnKernel) {
			t.Errorf("the sm_%d cubin lacks the kernel %s: %v", a, wheelserve.FlashAttnKernel, cubins[a])
		}
	}
}

// fatbinCubins reads the .nv_fatbin section of a host ELF (what nvcc links
// into a library) and returns, for each SASS architecture with an ELF
// cubin, the functions the cubins define. Each fatbin is a 16-byte header
// (magic 0xBA55ED50, version, header size, payload size) and entries of
// kind (1 PTX, 2 ELF), header size, payload size, ..., arch at offset 28.
// An uncompressed cubin is checked too: an EM_CUDA ELF whose e_flags name
// the same sm.
func fatbinCubins(so []byte) (map[int][]string, error) {
	f, err := elf.NewFile(bytes.NewReader(so))
	if err != nil {
		return nil, err
	}
	sec := f.Section(".nv_fatbin")
	if sec == nil {
		return nil, fmt.Errorf("no .nv_fatbin section: no device code")
	}
	d, err := sec.Data()
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	out := map[int][]string{}
	for off := 0; off+16 <= len(d); {
		if le.Uint32(d[off:]) != 0xBA55ED50 {
			if le.Uint32(d[off:]) == 0 { // padding
				off += 4
				continue
			}
			return nil, fmt.Errorf("fatbin at %#x: bad magic %#x", off, le.Uint32(d[off:]))
		}
		p := off + int(le.Uint16(d[off+6:]))
		end := p + int(le.Uint64(d[off+8:]))
		if end > len(d) {
			return nil, fmt.Errorf("fatbin at %#x: %d bytes past the section", off, end-len(d))
		}
		for p+32 <= end {
			kind, hs, size, arch := le.Uint16(d[p:]), int(le.Uint32(d[p+4:])), int(le.Uint64(d[p+8:])), int(le.Uint32(d[p+28:]))
			if hs < 32 || p+hs+size > end {
				return nil, fmt.Errorf("fatbin entry at %#x: header %d, payload %d past the fatbin", p, hs, size)
			}
			payload := d[p+hs : p+hs+size]
			p += hs + size
			if kind != 2 {
				continue
			}
			if _, ok := out[arch]; !ok {
				out[arch] = []string{}
			}
			if !bytes.HasPrefix(payload, []byte("\x7fELF")) {
				continue // compressed: the entry header's arch is all there is
			}
			// A cubin's e_version is the CUDA ELF ABI version, which
			// debug/elf refuses: read a copy that says EV_CURRENT.
			fixed := slices.Clone(payload)
			le.PutUint32(fixed[20:], uint32(elf.EV_CURRENT))
			cub, err := elf.NewFile(bytes.NewReader(fixed))
			if err != nil {
				return nil, fmt.Errorf("sm_%d cubin: %v", arch, err)
			}
			if cub.Machine != elf.EM_CUDA || cub.Class != elf.ELFCLASS64 {
				return nil, fmt.Errorf("sm_%d cubin: machine %v, class %v", arch, cub.Machine, cub.Class)
			}
			if flags := le.Uint32(payload[48:]); int(flags&0xff) != arch && int(flags>>16&0xff) != arch {
				return nil, fmt.Errorf("sm_%d cubin: e_flags %#x name another arch", arch, flags)
			}
			syms, err := cub.Symbols()
			if err != nil {
				return nil, fmt.Errorf("sm_%d cubin: %v", arch, err)
			}
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && !slices.Contains(out[arch], s.Name) {
					out[arch] = append(out[arch], s.Name)
				}
			}
			slices.Sort(out[arch])
		}
		off = (end + 7) &^ 7
	}
	return out, nil
}

// TestEndToEndUnsupportedPlatform: a platform no worker can run fails
// before any step, naming what the builder supports.
func TestEndToEndUnsupportedPlatform(t *testing.T) {
	c, reg := e2eEnv(t)
	defer c.Close()
	ctx := context.Background()
	ws, err := c.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		for _, p := range w.Platforms {
			if p.Architecture == "s390x" {
				t.Skip("this builder can run s390x (binfmt)")
			}
		}
	}
	b, err := recipes.CatalogRecipe("debian-cuda11.8")
	if err != nil {
		t.Fatal(err)
	}
	r, err := recipes.Parse("kiln.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg), recipes.WithWheelIndexes("http://127.0.0.1:9/simple"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Build(ctx, plan, Inputs{}, Options{Client: c, ContextDir: t.TempDir(), Progress: "quiet", Platforms: []string{"linux/amd64", "linux/s390x"}})
	if err == nil || !strings.Contains(err.Error(), "cannot run linux/s390x steps") || !strings.Contains(err.Error(), "linux/amd64") {
		t.Fatalf("err = %v", err)
	}
	t.Logf("refused in %v: %v", time.Since(start), err)
}
