package builder

import (
	"bytes"
	"context"
	"crypto/sha256"
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

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/moby/buildkit/client"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/builder/internal/wheelserve"
	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

// e2eEnv returns a BuildKit client and the fixture registry, or skips (fails
// with KILN_REQUIRE_BUILDKIT=1) when either is missing.
func e2eEnv(t *testing.T) (*client.Client, string) {
	t.Helper()
	return buildkitEnv(t, "12.4.1-devel-debian13", "12.4.1-base-debian13")
}

// buildkitEnv returns a BuildKit client and the registry KILN_REGISTRY
// names, or skips (fails with KILN_REQUIRE_BUILDKIT=1) when either is
// missing or the registry lacks one of the fixtures nvidia/cuda:TAG.
func buildkitEnv(t *testing.T, fixtureTags ...string) (*client.Client, string) {
	t.Helper()
	require := os.Getenv("KILN_REQUIRE_BUILDKIT") == "1"
	miss := func(format string, a ...any) {
		t.Helper()
		if require {
			t.Fatalf(format, a...)
		}
		t.Skipf(format+" (KILN_REQUIRE_BUILDKIT=1 makes this fail)", a...)
	}
	testdaemon.SkipShort(t)
	reg := os.Getenv("KILN_REGISTRY")
	if reg == "" {
		miss("KILN_REGISTRY not set (bash scripts/registry.sh start && bash scripts/fixtures.sh)")
	}
	resp, err := http.Get("http://" + reg + "/v2/")
	if err != nil {
		miss("registry %s: %v (bash scripts/registry.sh start)", reg, err)
	}
	resp.Body.Close()
	for _, tag := range fixtureTags {
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

// e2eRecipe is the embedded default recipe (CUDA 12.4.1, torch 2.6.0+cu124
// from the fixtures' PyPI-shaped index, FlashAttention compiled from source
// by nvcc 12.4 for A100 and H100, bitsandbytes), as a user gets it.
func e2eRecipe(t *testing.T) []byte {
	t.Helper()
	b, err := recipes.CatalogRecipe(recipes.OfflineRecipe)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixtureWheels is the fixtures' wheel directory (real torch and nvidia-*
// wheels repackaged from Debian's CUDA 12.4 binaries).
func fixtureWheels(t *testing.T) string {
	t.Helper()
	dir := testkit.FixturesDir()
	w := filepath.Join(dir, "wheels")
	if _, err := os.Stat(filepath.Join(w, "SHA256SUMS")); err != nil {
		if os.Getenv("KILN_REQUIRE_BUILDKIT") == "1" {
			t.Fatalf("fixture wheels missing: %v (bash scripts/fixtures.sh)", err)
		}
		t.Skipf("fixture wheels missing: %v (bash scripts/fixtures.sh)", err)
	}
	return w
}

// e2eIndex serves the fixtures' real torch and nvidia-* wheels, the
// stand-in bitsandbytes wheel and the flash_attn sdists as a PEP 503/691
// index until the test ends, and returns its URL.
func e2eIndex(t *testing.T) string {
	t.Helper()
	wheels := fixtureWheels(t)
	ix, err := wheelserve.NewIndex(wheelserve.StandIns(0)...)
	if err != nil {
		t.Fatal(err)
	}
	ix.Remove("torch")
	if err := ix.AddDir(wheels); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{wheelserve.FlashAttnVersion, wheelserve.FlashAttnVersionCU12} {
		if err := ix.AddSDist(wheelserve.FlashAttnSDist(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.AddSDist(wheelserve.DemoExtSDist()); err != nil {
		t.Fatal(err)
	}
	// A fixed port keeps the plan, and so BuildKit's cache keys, stable
	// across runs (the URL also names the index's contents, so a changed
	// wheel is fetched and built again); fall back to any port.
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

// pruneAll empties BuildKit's cache, as on a machine that never built.
func pruneAll(t *testing.T, c *client.Client) {
	t.Helper()
	ch := make(chan client.UsageInfo)
	done := make(chan int64)
	go func() {
		var n int64
		for u := range ch {
			n += u.Size
		}
		done <- n
	}()
	err := c.Prune(context.Background(), ch, client.PruneAll)
	close(ch)
	n := <-done
	if err != nil {
		t.Fatalf("buildctl prune --all: %v", err)
	}
	t.Logf("pruned BuildKit's cache: %d MB", n>>20)
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
	base, err := testkit.OpenImage(ctx, runtimeBase)
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

// TestEndToEnd builds the default recipe as a new user would, with kiln
// build's defaults (the torch install split at 512 MiB, gzip under the tag
// and zstd under TAG-zstd from one solve), twice from an empty BuildKit
// cache (the same two digests: reproducible from nothing, not only a
// cached rebuild), then once more on the warm cache (nothing executed),
// then after an app change (only the app layer is new).
// The runtime image is checked against the runtime rules (CUDA shipped
// once), its probes import the real CUDA torch (torch.version.cuda ==
// "12.4", libtorch_cuda loaded) and the FlashAttention stand-in, which nvcc
// 12.4 compiled for sm_80 and sm_90.
func TestEndToEnd(t *testing.T) {
	testdaemon.PruneAfter(t, false)
	c, reg := e2eEnv(t)
	ctx := context.Background()

	idx := e2eIndex(t)

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "kiln.yaml"), e2eRecipe(t), 0o644)
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
	if plan.RuntimeFlavor != "base" || !strings.HasSuffix(plan.BaseImages.Runtime, "-base-debian13") {
		t.Fatalf("runtime base %s (%s), want -base: the wheels bring CUDA", plan.BaseImages.Runtime, plan.RuntimeFlavor)
	}
	if plan.FlashAttnBuild == nil || plan.FlashAttnBuild.CUDAArchs != "80;90" {
		t.Fatalf("flash_attn build %+v, want a source build for 80;90", plan.FlashAttnBuild)
	}
	if plan.GPUCode == nil || strings.Join(plan.GPUCode.Archs, ",") != "sm_80,sm_90" {
		t.Fatalf("gpu_code %+v, want pruning to sm_80,sm_90", plan.GPUCode)
	}
	tools := testdaemon.KilnBinary(t)
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	repo := fmt.Sprintf("%s/kiln-e2e/app", reg)
	// What `kiln build --push REPO:TAG` does by default: the torch install
	// split into layers of whole wheels (--max-layer-size 512MiB), gzip
	// under TAG; build adds zstd under TAG-zstd, from the same solve.
	buildWith := func(tag string, o Options) *Result {
		t.Helper()
		start := time.Now()
		o.Client, o.ContextDir, o.Progress, o.Tools = c, dir, "quiet", tools
		o.Compression, o.MaxLayerSize = "gzip", 512<<20
		if o.Outputs == nil {
			o.Outputs = []Output{mustOutput(t, repo+":"+tag)}
		}
		res, err := Build(ctx, plan, in, o)
		if err != nil {
			t.Fatalf("build %s: %v", tag, err)
		}
		t.Logf("build %s: %s in %s, %d steps, %d cached, %d executed", tag, res.Digest, time.Since(start).Round(time.Millisecond), res.Status.Vertices, res.Status.Cached, res.Status.Executed)
		return res
	}
	build := func(tag string) *Result {
		t.Helper()
		res := buildWith(tag, Options{Outputs: []Output{mustOutput(t, repo+":"+tag), {Ref: mustOutput(t, repo+":"+tag+"-zstd").Ref, Compression: "zstd"}}})
		if len(res.Pushed) != 2 || res.Digest != res.Pushed[0].Digest || res.Pushed[0].Compression != "gzip" || res.Pushed[1].Compression != "zstd" {
			t.Fatalf("build %s pushed %+v, want gzip and zstd", tag, res.Pushed)
		}
		return res
	}
	same := func(a, b *Result) bool {
		return a.Pushed[0].Digest == b.Pushed[0].Digest && a.Pushed[1].Digest == b.Pushed[1].Digest
	}

	pruneAll(t, c)
	// And leave nothing behind: each clean build holds ~19 GB of BuildKit
	// state, and the disk is the machine's binding limit.
	t.Cleanup(func() { pruneAll(t, c) })
	r1 := build("v1")
	// The FlashAttention compile installs torch to build against and
	// uninstalls it (dropBuildDeps): its snapshot is the wheel, not a
	// second torch (3.6 GB of BuildKit's cache before).
	du, err := c.DiskUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var compiles int
	for _, r := range du {
		if strings.Contains(r.Description, "pip wheel --no-deps --no-build-isolation") && strings.HasPrefix(r.Description, "mount / from exec") {
			compiles++
			if r.Size > 256<<20 {
				t.Errorf("the compile step's snapshot holds %d MB: %s", r.Size>>20, r.Description)
			}
		}
	}
	if compiles == 0 {
		t.Error("no compile step in BuildKit's disk usage")
	}
	// Reproducible from nothing: the same inputs on an empty cache give
	// the same two images.
	pruneAll(t, c)
	if r1b := build("v1-clean"); !same(r1, r1b) {
		t.Errorf("two builds from an empty cache, two digests: %+v vs %+v", r1.Pushed, r1b.Pushed)
		diffLayers(t, ctx, repo+"@"+r1.Pushed[1].Digest, repo+"@"+r1b.Pushed[1].Digest)
	}

	// A rebuild executes nothing and gives the same two images. It is done
	// once, with SLSA provenance and an SBOM attested beside each image (an
	// index around the same image): a bare no-op rebuild beside it shows
	// nothing more. (Its exports re-encode no layer: the steps dated their
	// files, and the exporter does not rewrite them.)
	start := time.Now()
	r2 := checkProvenance(t, ctx, buildWith, repo, r1.Pushed, in)
	if r2.Status.Executed != 0 {
		t.Errorf("no-op rebuild executed %d steps", r2.Status.Executed)
	}
	t.Logf("no-op rebuild (with provenance): %s", time.Since(start).Round(time.Millisecond))

	// The runtime image carries no nvcc, headers, static libs, caches, or
	// CUDA library twice; its two encodings hold the same tars.
	open := func(digest string) *layers.Image {
		t.Helper()
		img, err := testkit.OpenImage(ctx, repo+"@"+digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { img.Close() })
		return img
	}
	img1, img1z := open(r1.Pushed[0].Digest), open(r1.Pushed[1].Digest)
	base := checkRuntimeRules(t, ctx, img1, plan.BaseImages.Runtime)
	// system, torch in several layers of whole wheels, extensions, app.
	if len(img1.Layers) <= len(base.Layers)+4 || len(img1z.Layers) != len(img1.Layers) {
		t.Errorf("%d layers (zstd %d) on a %d-layer base, want system, torch split at 512 MiB, extensions, app", len(img1.Layers), len(img1z.Layers), len(base.Layers))
	}
	for i := range base.Layers {
		if img1.Layers[i].DiffID != base.Layers[i].DiffID || img1z.Layers[i].DiffID != base.Layers[i].DiffID {
			t.Errorf("base layer %d rewritten", i)
		}
	}
	for i, l := range img1.Layers[len(base.Layers):] {
		lz := img1z.Layers[len(base.Layers)+i]
		if !strings.Contains(string(l.MediaType), "gzip") || !strings.Contains(string(lz.MediaType), "zstd") {
			t.Errorf("layer %d: %s / %s, want gzip / zstd", l.Index, l.MediaType, lz.MediaType)
		}
		if l.DiffID != lz.DiffID {
			t.Errorf("layer %d: gzip and zstd images hold different tars", l.Index)
		}
	}
	for _, img := range []*layers.Image{img1, img1z} {
		env := strings.Join(img.Config.Config.Env, "\n")
		for _, want := range []string{"NVIDIA_REQUIRE_CUDA=cuda>=12.4", "CUDA_VERSION=12.4.1", "NVIDIA_VISIBLE_DEVICES=all", "LD_LIBRARY_PATH=" + DefaultLDLibraryPath} {
			if !strings.Contains(env, want) {
				t.Errorf("config env lacks %s:\n%s", want, env)
			}
		}
		if img.Config.Config.Labels[layers.LabelRecipeHash] != r.Hash() {
			t.Errorf("labels %v", img.Config.Config.Labels)
		}
	}
	checkFlashAttnCubins(t, ctx, img1z, len(base.Layers))
	checkTorchPruned(t, ctx, img1z, len(base.Layers))

	// An app-only change re-pushes only the app layer, in both encodings.
	writeApp("print('hello again')\n")
	r3 := build("v3")
	if r3.Digest == r1.Digest {
		t.Fatal("app change did not change the image")
	}
	for k, before := range []*layers.Image{img1, img1z} {
		comp := r3.Pushed[k].Compression
		after := open(r3.Pushed[k].Digest)
		if len(after.Layers) != len(before.Layers) {
			t.Fatalf("%s: layers %d vs %d", comp, len(after.Layers), len(before.Layers))
		}
		var changed []int
		var pushed int64
		for i := range before.Layers {
			if before.Layers[i].Digest != after.Layers[i].Digest {
				changed = append(changed, i)
				pushed += after.Layers[i].Size
			}
		}
		if len(changed) != 1 || changed[0] != len(before.Layers)-1 {
			t.Errorf("%s: app change changed layers %v of %d, want only the last", comp, changed, len(before.Layers))
		}
		t.Logf("%s: app-only change: %d new layer bytes of %d", comp, pushed, after.CompressedSize())
	}

	// A failing probe fails the build.
	bad := *plan
	bad.Test = []string{"python3 -c 'import does_not_exist'"}
	if _, err := Build(ctx, &bad, in, Options{Client: c, ContextDir: dir, Progress: "quiet", Tools: tools}); err == nil {
		t.Error("a failing test: command did not fail the build")
	}
}

// diffLayers names the layers (and, for each, a few paths) where two
// builds that should be one differ, so a reproducibility failure says what
// to fix.
func diffLayers(t *testing.T, ctx context.Context, a, b string) {
	t.Helper()
	ia, err := testkit.OpenImage(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ia.Close()
	ib, err := testkit.OpenImage(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	sums := func(l *layers.Layer) map[string]string {
		m := map[string]string{}
		_, err := l.Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, body io.Reader) error {
			h := sha256.New()
			io.Copy(h, body)
			m[e.Path] = fmt.Sprintf("%x %o %s %d:%d", h.Sum(nil), e.Header.Mode, e.Header.Linkname, e.Header.Uid, e.Header.Gid)
			return nil
		})
		if err != nil {
			t.Logf("walk: %v", err)
		}
		return m
	}
	for i := range ia.Layers {
		if i >= len(ib.Layers) || ia.Layers[i].DiffID == ib.Layers[i].DiffID {
			continue
		}
		ma, mb := sums(ia.Layers[i]), sums(ib.Layers[i])
		var diff []string
		for p, v := range ma {
			if mb[p] != v {
				diff = append(diff, p)
			}
		}
		for p := range mb {
			if _, ok := ma[p]; !ok {
				diff = append(diff, p)
			}
		}
		slices.Sort(diff)
		if len(diff) > 20 {
			diff = diff[:20]
		}
		t.Errorf("layer %d (%s) differs: %v", i, ia.Layers[i].CreatedBy, diff)
	}
}

// checkTorchPruned reads libtorch_cuda from the torch layer: the recipe's
// gpus (a100, h100) leave it the sm_80, sm_90 and sm_90a cubins and the
// compute_90 PTX of its sm_50…sm_90 build, at its original size.
func checkTorchPruned(t *testing.T, ctx context.Context, img *layers.Image, baseLayers int) {
	t.Helper()
	var found bool
	for _, l := range img.Layers[baseLayers:] {
		_, err := l.Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, body io.Reader) error {
			if !e.IsRegular() || path.Base(e.Path) != "libtorch_cuda.so" {
				return nil
			}
			f, err := fatbin.Scan(body)
			if err != nil {
				return err
			}
			found = true
			t.Logf("%s (%d bytes): %v", e.Path, f.Size, f.Archs())
			if want := []string{"sm_80", "sm_90", "sm_90a", "compute_90"}; !slices.Equal(f.Archs(), want) {
				t.Errorf("%s: GPU code %v, want %v", e.Path, f.Archs(), want)
			}
			if f.Size != e.Header.Size {
				t.Errorf("%s: scanned %d of %d bytes", e.Path, f.Size, e.Header.Size)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !found {
		t.Error("no libtorch_cuda.so in the runtime image")
	}
}

// checkFlashAttnCubins finds the compiled FlashAttention library in kiln's
// layers and checks its fat binary: an sm_80 and an sm_90 cubin of the
// kernels, as FLASH_ATTN_CUDA_ARCHS=80;90 asked of nvcc 12.4.
func checkFlashAttnCubins(t *testing.T, ctx context.Context, img *layers.Image, baseLayers int) {
	t.Helper()
	var so, info []byte
	var soPath string
	for _, l := range img.Layers[baseLayers:] {
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
	if !strings.Contains(string(info), "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90") || !strings.Contains(string(info), "cuda_12.4") {
		t.Errorf("setup.py did not compile for 80;90 with nvcc 12.4: %s", info)
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
	b, err := recipes.CatalogRecipe(recipes.OfflineRecipe)
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
