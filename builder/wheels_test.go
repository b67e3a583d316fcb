package builder

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/builder/internal/wheelserve"
	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelkey"
	"github.com/kiln-build/kiln/registry"
)

// indexedSourcePlan resolves the catalog recipe with FlashAttention built from
// source, its sdist served by a local index; it returns the plan and the
// sdist's sha256.
func indexedSourcePlan(t *testing.T, mutate func(*recipes.Recipe)) (*recipes.Plan, string) {
	t.Helper()
	ix, err := wheelserve.NewIndex(wheelserve.StandIns(0)...)
	if err != nil {
		t.Fatal(err)
	}
	sd := wheelserve.FlashAttnSDist(wheelserve.FlashAttnVersion)
	if err := ix.AddSDist(sd); err != nil {
		t.Fatal(err)
	}
	if err := ix.AddSDist(wheelserve.DemoExtSDist()); err != nil {
		t.Fatal(err)
	}
	b, err := sd.Build()
	if err != nil {
		t.Fatal(err)
	}
	idx, stop, err := wheelserve.Serve(ix, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	p := catalogPlan(t, func(r *recipes.Recipe) {
		r.FlashAttn = &recipes.FASpec{Version: wheelserve.FlashAttnVersion, Build: "source"}
		r.GPUs = []string{"a100", "h100"}
		if mutate != nil {
			mutate(r)
		}
	}, recipes.WithMirror("127.0.0.1:5000"), recipes.WithWheelIndexes(idx))
	if p.FlashAttnBuild == nil {
		t.Fatalf("plan builds no FlashAttention from source: %+v", p.FlashAttn)
	}
	return p, fmt.Sprintf("sha256:%x", sha256.Sum256(b))
}

// The compile step is a step of its own; a wheel the cache answered
// replaces it with a copy from the kiln-wheels context, and the runtime
// install that reads the wheelhouse is the same step either way.
func TestCachedWheelReplacesCompileStep(t *testing.T) {
	p, _ := indexedSourcePlan(t, nil)
	compiles := func(d *decoded) int {
		n := 0
		for _, e := range d.execs {
			if strings.Contains(strings.Join(e.Meta.Args, " "), "pip wheel --no-deps --no-build-isolation") {
				n++
			}
		}
		return n
	}
	g, err := NewGraph(p, Inputs{}, amd64)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Compiled) != 1 || g.Compiled[0].Package != "flash-attn" {
		t.Fatalf("compiled wheels %+v, want flash-attn", g.Compiled)
	}
	d, _ := decode(t, p, Inputs{}, false)
	if compiles(d) != 1 || slices.Contains(d.sources, "local://"+WheelsName) {
		t.Fatalf("without a cached wheel: %d compile steps, sources %v", compiles(d), d.sources)
	}
	in := Inputs{CachedWheels: map[WheelSlot]string{{"linux/amd64", "flash-attn"}: "flash_attn-2.7.0.post2-cp311-cp311-linux_x86_64.whl"}}
	gc, err := NewGraph(p, in, amd64)
	if err != nil {
		t.Fatal(err)
	}
	if len(gc.Compiled) != 0 {
		t.Errorf("a cached wheel is still compiled: %+v", gc.Compiled)
	}
	dc, _ := decode(t, p, in, false)
	if n := compiles(dc); n != 0 {
		t.Errorf("a cached wheel: %d compile steps", n)
	}
	if !slices.Contains(dc.sources, "local://"+WheelsName) {
		t.Errorf("sources %v lack the %s context", dc.sources, WheelsName)
	}
	install := func(d *decoded) string {
		for _, e := range d.execs {
			if s := strings.Join(e.Meta.Args, " "); strings.Contains(s, "pip install --no-index") && strings.Contains(s, "/wheelhouse/extensions") && !strings.Contains(s, "pip wheel") {
				return s
			}
		}
		return ""
	}
	if a, b := install(d), install(dc); a == "" || a != b {
		t.Errorf("runtime install differs:\n%s\n%s", a, b)
	}
}

// The key carries the sdist's digest from the index and every input of
// the compile; the parallelism is not in it.
func TestWheelKeysFromPlan(t *testing.T) {
	ctx := context.Background()
	p, src := indexedSourcePlan(t, nil)
	keys, err := WheelKeys(ctx, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("keys %+v", keys)
	}
	k := keys[0]
	if k.Source != src || k.Package != "flash-attn" || k.Version != wheelserve.FlashAttnVersion || k.Platform != "linux/amd64" ||
		strings.Join(k.Archs, ";") != "80;90" || k.CUDA != p.CUDA || k.PythonABI != "cp"+strings.ReplaceAll(p.Python, ".", "") || k.Torch == "" || k.TorchCUDA == "" || k.CXX11ABI == "" {
		t.Errorf("key %s", k.JSON())
	}
	if err := k.Check(); err != nil {
		t.Error(err)
	}
	if !slices.Contains(k.Flags, "LDFLAGS=-Wl,--strip-all") || slices.ContainsFunc(k.Flags, func(f string) bool { return strings.HasPrefix(f, "MAX_JOBS=") }) {
		t.Errorf("flags %v", k.Flags)
	}
	// A bigger builder (more jobs) shares the wheel; another GPU list does not.
	big, _ := indexedSourcePlan(t, func(r *recipes.Recipe) { r.Build = &recipes.BuildSpec{MemoryGB: 512, CPUs: 64} })
	if big.FlashAttnBuild.MaxJobs == p.FlashAttnBuild.MaxJobs {
		t.Fatal("the bigger builder runs as many jobs")
	}
	kb, err := WheelKeys(ctx, big, nil, nil)
	if err != nil || kb[0].Digest() != k.Digest() {
		t.Errorf("MAX_JOBS changed the key: %v %v", kb, err)
	}
	a100, _ := indexedSourcePlan(t, func(r *recipes.Recipe) { r.GPUs = []string{"a100"} })
	ka, err := WheelKeys(ctx, a100, nil, nil)
	if err != nil || ka[0].Digest() == k.Digest() || !slices.Equal(wheelkey.Diff(k, ka[0]), []string{"archs"}) {
		t.Errorf("a100 only: %v, %v", ka, err)
	}
}

// Before the solve: a hit is fetched, verified and named in
// Inputs.CachedWheels; a corrupt cached wheel is refused (compiled
// instead); a miss compiles.
func TestPrepareWheels(t *testing.T) {
	ctx := context.Background()
	p, _ := indexedSourcePlan(t, nil)
	var corrupt bool
	h := testimage.RegistryServer(t).Config.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if corrupt && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			b := rec.Body.Bytes()
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			if len(b) > 10 {
				b[len(b)/2] ^= 0x55
			}
			w.WriteHeader(rec.Code)
			w.Write(b)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	repo := strings.TrimPrefix(srv.URL, "http://") + "/kiln/wheels"
	c, err := wheelcache.Open(repo, wheelcache.WithRegistryOptions(registry.WithFetchOptions(registry.WithRetries(1, time.Millisecond))))
	if err != nil {
		t.Fatal(err)
	}
	wc := &WheelCache{Cache: c}
	slot := WheelSlot{"linux/amd64", "flash-attn"}

	var in Inputs
	r, cleanup, err := prepareWheels(ctx, p, &in, wc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.CachedWheels[slot] != "" || r.uses[0].Cached || r.hasCached() {
		t.Errorf("empty cache: %+v", r.uses[0])
	}
	cleanup()

	keys, err := WheelKeys(ctx, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wheel := filepath.Join(t.TempDir(), "flash_attn-2.7.0.post2-cp311-cp311-linux_x86_64.whl")
	os.WriteFile(wheel, []byte(strings.Repeat("compiled ", 4096)), 0o644)
	if _, err := c.Push(ctx, keys[0], wheel); err != nil {
		t.Fatal(err)
	}
	in = Inputs{}
	r, cleanup, err = prepareWheels(ctx, p, &in, wc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if in.CachedWheels[slot] != filepath.Base(wheel) || !r.uses[0].Cached {
		t.Fatalf("a hit: %+v, %v", r.uses[0], in.CachedWheels)
	}
	if b, err := os.ReadFile(filepath.Join(r.dir, filepath.Base(wheel))); err != nil || len(b) != 9*4096 {
		t.Errorf("fetched wheel: %d bytes, %v", len(b), err)
	}

	corrupt = true
	in = Inputs{}
	r2, cleanup2, err := prepareWheels(ctx, p, &in, wc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup2()
	if in.CachedWheels[slot] != "" || r2.uses[0].Cached || !strings.Contains(r2.uses[0].Note, "refused") {
		t.Errorf("a corrupt wheel: %+v, %v", r2.uses[0], in.CachedWheels)
	}
	if ents, _ := os.ReadDir(r2.dir); len(ents) != 0 {
		t.Errorf("the corrupt wheel left %v", ents)
	}
}

// A pip_from_source requirement (a project with only a source archive)
// compiles in a step of its own, into a directory of its own that the
// runtime install finds its wheel in, and is never asked of the index
// as a wheel; it is keyed like FlashAttention (its sdist's sha256, the
// plan's GPU list) and a cache hit replaces its compile step alone.
func TestSourceRequirementCompiled(t *testing.T) {
	ctx := context.Background()
	demo := wheelserve.DemoExtName
	p, _ := indexedSourcePlan(t, func(r *recipes.Recipe) {
		r.Pip = append(r.Pip, demo+"=="+wheelserve.DemoExtVersion)
		r.PipFromSource = []string{demo}
	})
	if c := p.Compiled(); len(c) != 2 || c[1].Name != demo {
		t.Fatalf("compiled %+v", c)
	}
	g, err := NewGraph(p, Inputs{}, amd64)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Compiled) != 2 || g.Compiled[1].Package != demo {
		t.Fatalf("compiled wheels %+v", g.Compiled)
	}
	d, _ := decode(t, p, Inputs{}, false)
	var compile, download, install string
	for _, e := range d.execs {
		s := strings.Join(e.Meta.Args, " ")
		switch {
		case strings.Contains(s, "--no-binary "+demo+" "):
			compile = s
		case strings.Contains(s, "pip download") && strings.Contains(s, "/wheelhouse/pip"):
			download = s
		case strings.Contains(s, "pip install --no-index") && strings.Contains(s, "/wheelhouse/pip") && !strings.Contains(s, "pip wheel"):
			install = s
		}
	}
	for _, want := range []string{"pip wheel --no-deps --no-build-isolation", "--wheel-dir /wheelhouse/src/" + demo, "TORCH_CUDA_ARCH_LIST='8.0;9.0'", "LDFLAGS=-Wl,--strip-all", "pip install --no-index --find-links /wheelhouse/torch"} {
		if !strings.Contains(compile, want) {
			t.Errorf("compile step lacks %q:\n%s", want, compile)
		}
	}
	if strings.Contains(download, demo) {
		t.Errorf("the source-only requirement is asked of the index as a wheel:\n%s", download)
	}
	if !strings.Contains(install, "--find-links /wheelhouse/src/"+demo) || !strings.Contains(install, demo+"=="+wheelserve.DemoExtVersion) {
		t.Errorf("the runtime install does not find the compiled wheel:\n%s", install)
	}
	df, err := Dockerfile(p, Inputs{})
	if err != nil || !strings.Contains(df, "--no-binary "+demo+" ") {
		t.Errorf("the Dockerfile export lacks the compile step (%v)", err)
	}

	keys, err := WheelKeys(ctx, p, nil, nil)
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	k := keys[1]
	b, _ := wheelserve.DemoExtSDist().Build()
	if k.Package != demo || k.Version != wheelserve.DemoExtVersion || k.Source != fmt.Sprintf("sha256:%x", sha256.Sum256(b)) ||
		strings.Join(k.Archs, ";") != "8.0;9.0" || k.Torch == "" || !slices.Contains(k.Flags, "pip:--no-binary") {
		t.Errorf("key %s", k.JSON())
	}
	if err := k.Check(); err != nil {
		t.Error(err)
	}

	c, err := wheelcache.Open(testimage.Registry(t) + "/kiln/wheels")
	if err != nil {
		t.Fatal(err)
	}
	wheel := filepath.Join(t.TempDir(), "kiln_demo_ext-1.0-cp311-cp311-linux_x86_64.whl")
	os.WriteFile(wheel, []byte("compiled demo"), 0o644)
	if _, err := c.Push(ctx, k, wheel); err != nil {
		t.Fatal(err)
	}
	var in Inputs
	r, cleanup, err := prepareWheels(ctx, p, &in, &WheelCache{Cache: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if len(r.uses) != 2 || r.uses[0].Cached || !r.uses[1].Cached || in.CachedWheels[WheelSlot{"linux/amd64", demo}] != filepath.Base(wheel) {
		t.Fatalf("uses %+v, cached %v: want the demo wheel from the cache, flash-attn compiled", r.uses, in.CachedWheels)
	}
	gc, err := NewGraph(p, in, amd64)
	if err != nil {
		t.Fatal(err)
	}
	if len(gc.Compiled) != 1 || gc.Compiled[0].Package != "flash-attn" {
		t.Errorf("with the demo wheel cached, compiled %+v", gc.Compiled)
	}
	// The compile that runs (flash-attn's miss) is pinned to the source
	// archive its key names, in the LLB and in the Dockerfile alike.
	fa := keys[0]
	pin := "echo 'flash-attn==" + wheelserve.FlashAttnVersion + " --hash=sha256:" + strings.TrimPrefix(fa.Source, "sha256:") + "' > " + pinFile
	dp, _ := decode(t, p, in, false)
	var pinned string
	for _, e := range dp.execs {
		if s := strings.Join(e.Meta.Args, " "); strings.Contains(s, "pip wheel") {
			pinned = s
		}
	}
	if !strings.Contains(pinned, pin) || !strings.HasSuffix(pinned, " --require-hashes -r "+pinFile+"; "+dropBuildDeps) || strings.Contains(pinned, "'flash-attn=="+wheelserve.FlashAttnVersion+"' ") {
		t.Errorf("flash-attn's compile is not pinned to %s:\n%s", fa.Source, pinned)
	}
	if df, err := Dockerfile(p, in); err != nil || !strings.Contains(df, "--require-hashes -r "+pinFile) {
		t.Errorf("the Dockerfile export is not pinned as the LLB is (%v)", err)
	}
}

// N4: kiln build --locked takes a cached wheel only when the lock pins
// its sha256: a wheel pushed under the same key after the lock (by anyone
// who can push to the cache) is compiled instead, as is a hit the lock
// recorded as a miss; the pinned wheel is used. A wheel the Verify hook
// refuses (--wheel-cache-verify-key: not signed under the key) is
// compiled too, and the note says why.
func TestPrepareWheelsTrustsOnlyPinnedOrSigned(t *testing.T) {
	ctx := context.Background()
	p, _ := indexedSourcePlan(t, nil)
	c, err := wheelcache.Open(testimage.Registry(t)+"/kiln/wheels", wheelcache.WithRegistryOptions(registry.WithFetchOptions(registry.WithRetries(1, time.Millisecond))))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := WheelKeys(ctx, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wheel := filepath.Join(t.TempDir(), "flash_attn-2.7.0.post2-cp311-cp311-linux_x86_64.whl")
	os.WriteFile(wheel, []byte(strings.Repeat("locked ", 4096)), 0o644)
	e, err := c.Push(ctx, keys[0], wheel)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := func(context.Context, *wheelcache.Entry) error {
		return errors.New("--wheel-cache-verify-key: no signature")
	}
	slot := WheelSlot{"linux/amd64", "flash-attn"}
	for _, tc := range []struct {
		name   string
		wc     WheelCache
		cached bool
		note   string
	}{
		{"pinned", WheelCache{Locked: true, Pinned: map[string]string{keys[0].Digest(): e.Digest.Hex}}, true, ""},
		{"other bytes than the lock's", WheelCache{Locked: true, Pinned: map[string]string{keys[0].Digest(): strings.Repeat("ab", 32)}}, false, "the lock pins"},
		{"a miss in the lock", WheelCache{Locked: true, Pinned: map[string]string{}}, false, "the lock records no cached wheel"},
		{"not signed", WheelCache{Verify: unsigned}, false, "no signature"},
	} {
		var in Inputs
		wc := tc.wc
		wc.Cache, wc.Keys = c, keys
		r, cleanup, err := prepareWheels(ctx, p, &in, &wc, nil)
		if err != nil {
			t.Fatal(err)
		}
		u := r.uses[0]
		if u.Cached != tc.cached || (in.CachedWheels[slot] != "") != tc.cached || !strings.Contains(u.Note, tc.note) {
			t.Errorf("%s: cached %v note %q, want cached %v and %q", tc.name, u.Cached, u.Note, tc.cached, tc.note)
		}
		cleanup()
	}
}
