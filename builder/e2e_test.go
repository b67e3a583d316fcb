package builder

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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

func TestEndToEnd(t *testing.T) {
	c, reg := e2eEnv(t)
	ctx := context.Background()

	ix, err := wheelserve.NewIndex(wheelserve.StandIns(8)...)
	if err != nil {
		t.Fatal(err)
	}
	// A fixed port keeps the plan, and so BuildKit's cache keys, stable
	// across runs; fall back to any port.
	idx, stop, err := wheelserve.Serve(ix, "127.0.0.1:39517")
	if err != nil {
		idx, stop, err = wheelserve.Serve(ix, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
	}
	defer stop()

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
	rep, err := analyze.Image(ctx, img1, analyze.Options{})
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
	// Rules the runtime base itself breaks are the fixture's, not kiln's:
	// check those against the base and, for kiln's own layers, check that
	// none adds a forbidden class.
	base, err := layers.Open(ctx, plan.BaseImages.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	baseRep, err := analyze.Image(ctx, base, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	baseBroken := map[string]bool{}
	for _, v := range rules.Check(baseRep) {
		baseBroken[v.Rule] = true
		t.Logf("the runtime base %s itself breaks %s: %s", plan.BaseImages.Runtime, v.Rule, v.Message)
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
