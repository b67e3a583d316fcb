package builder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/builder/internal/wheelserve"
	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelindex"
	"github.com/kiln-build/kiln/recipes/wheelkey"
)

// stepRuns reads BuildKit's rawjson progress: how many times a vertex
// named name ran (completed, not from the cache).
func stepRuns(t *testing.T, progress []byte, name string) int {
	t.Helper()
	ran := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(progress))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var st struct {
			Vertexes []struct {
				Digest    string     `json:"digest"`
				Name      string     `json:"name"`
				Cached    bool       `json:"cached"`
				Completed *time.Time `json:"completed"`
			} `json:"vertexes"`
		}
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			continue
		}
		for _, v := range st.Vertexes {
			if v.Name == name && v.Completed != nil && !v.Cached {
				ran[v.Digest] = true
			}
		}
	}
	return len(ran)
}

// TestWheelCacheOnBuildKit is a CI runner's day with the offline recipe
// (FlashAttention compiled from source by nvcc 12.4): an empty BuildKit
// and an empty wheel cache compile and push the wheel; BuildKit is pruned
// completely (a fresh ephemeral runner); the rebuild fetches the wheel,
// the compile step does not run, and the image digest is the same; a
// changed GPU architecture list compiles again.
//
// Three builds of the CUDA stack, two from an empty BuildKit (~15 min on
// 2 idle cores, 38 min under load): over the CI budget beside
// TestEndToEnd, so it runs in make e2e-slow (KILN_SLOW_E2E=1).
func TestWheelCacheOnBuildKit(t *testing.T) {
	if os.Getenv("KILN_SLOW_E2E") != "1" {
		t.Skip("three CUDA-stack builds from an empty BuildKit: run with make e2e-slow (KILN_SLOW_E2E=1)")
	}
	testdaemon.PruneAfter(t, false)
	c, reg := e2eEnv(t)
	ctx := context.Background()
	idx := e2eIndex(t)

	dir := t.TempDir()
	// Beside FlashAttention, a requirement that publishes only a source
	// archive (a C extension): compiled, cached and fetched the same way,
	// and imported and called by a probe in the runtime image.
	demo := wheelserve.DemoExtName
	yaml := strings.Replace(string(e2eRecipe(t)), "\ntest:\n", "\npip: ["+demo+"=="+wheelserve.DemoExtVersion+"]\npip_from_source: ["+demo+"]\ntest:\n"+
		"  - python3 -c \"import kiln_demo_ext; assert kiln_demo_ext.crc32(b'kiln') == 3911661381\"\n", 1)
	os.WriteFile(filepath.Join(dir, "kiln.yaml"), []byte(yaml), 0o644)
	os.MkdirAll(filepath.Join(dir, "app"), 0o755)
	os.WriteFile(filepath.Join(dir, "app", "main.py"), []byte("print('hello from kiln')\n"), 0o644)
	r, err := recipes.Load(filepath.Join(dir, "kiln.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(gpus ...string) *recipes.Plan {
		t.Helper()
		rr := *r
		if len(gpus) > 0 {
			rr.GPUs = gpus
		}
		p, err := recipes.Resolve(ctx, &rr, recipes.WithMirror(reg), recipes.WithWheelIndexes(idx))
		if err != nil {
			t.Fatal(err)
		}
		if p.FlashAttnBuild == nil {
			t.Fatal("the offline recipe builds no FlashAttention from source")
		}
		return p
	}
	plan := resolve()
	// An empty cache: a repository of its own.
	cacheRepo := fmt.Sprintf("%s/kiln-e2e/wheels-%d", reg, time.Now().UnixNano())
	cache, err := wheelcache.Open(cacheRepo)
	if err != nil {
		t.Fatal(err)
	}
	tools := testdaemon.KilnBinary(t)
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	repo := reg + "/kiln-e2e/wheelcache"
	const compile = "devel: compile flash-attn"
	build := func(tag string, p *recipes.Plan) (*Result, []byte, time.Duration) {
		t.Helper()
		var progress bytes.Buffer
		start := time.Now()
		res, err := Build(ctx, p, in, Options{
			Client: c, ContextDir: dir, Tools: tools, Progress: "rawjson", ProgressOut: &progress,
			Outputs:    []Output{mustOutput(t, repo+":"+tag)},
			WheelCache: &WheelCache{Cache: cache, Index: &wheelindex.Client{}},
		})
		if err != nil {
			t.Fatalf("build %s: %v", tag, err)
		}
		d := time.Since(start)
		if len(res.Wheels) != 2 || res.Wheels[1].Package != demo {
			t.Fatalf("build %s: wheels %+v", tag, res.Wheels)
		}
		t.Logf("build %s: %s in %s; %d steps, %d executed; wheels %+v", tag, res.Digest, d.Round(time.Millisecond), res.Status.Vertices, res.Status.Executed, res.Wheels)
		return res, progress.Bytes(), d
	}

	pruneAll(t, c)
	t.Cleanup(func() { pruneAll(t, c) })
	r1, p1, d1 := build("cold", plan)
	if w := r1.Wheels[0]; w.Cached || !w.Pushed || w.Size == 0 || !strings.HasSuffix(w.Ref, ":"+w.Key.Tag()) {
		t.Fatalf("first build: wheel %+v, want compiled and pushed", w)
	}
	if n := stepRuns(t, p1, compile); n != 1 {
		t.Errorf("first build ran the compile step %d times", n)
	}
	if w := r1.Wheels[1]; w.Cached || !w.Pushed || stepRuns(t, p1, "devel: compile "+demo) != 1 {
		t.Fatalf("first build: %s wheel %+v, want compiled and pushed", demo, w)
	}

	// A fresh runner: nothing in BuildKit, the wheel in the registry.
	pruneAll(t, c)
	r2, p2, d2 := build("rebuild", plan)
	if w := r2.Wheels[0]; !w.Cached || w.Pushed || w.Digest != r1.Wheels[0].Digest {
		t.Errorf("rebuild: wheel %+v, want the pushed one (%s) from the cache", w, r1.Wheels[0].Digest)
	}
	if n := stepRuns(t, p2, compile); n != 0 {
		t.Errorf("rebuild ran the compile step %d times", n)
	}
	if n := stepRuns(t, p2, CachedStepName("flash-attn")); n != 1 {
		t.Errorf("rebuild copied the cached wheel %d times", n)
	}
	if w := r2.Wheels[1]; !w.Cached || w.Digest != r1.Wheels[1].Digest || stepRuns(t, p2, "devel: compile "+demo) != 0 {
		t.Errorf("rebuild: %s wheel %+v, want the pushed one (%s) from the cache", demo, w, r1.Wheels[1].Digest)
	}
	if r2.Digest != r1.Digest {
		t.Errorf("the cached wheel gave another image: %s vs %s", r2.Digest, r1.Digest)
		diffLayers(t, ctx, repo+"@"+r1.Digest, repo+"@"+r2.Digest)
	}
	t.Logf("cold-runner rebuild: %s against the first build's %s: ratio %.2f", d2.Round(time.Millisecond), d1.Round(time.Millisecond), d2.Seconds()/d1.Seconds())

	// Another GPU list is another wheel: compiled (and pushed) again.
	a100 := resolve("a100")
	if a100.FlashAttnBuild.CUDAArchs == plan.FlashAttnBuild.CUDAArchs {
		t.Fatalf("a100 alone compiles for %s too", a100.FlashAttnBuild.CUDAArchs)
	}
	r3, p3, _ := build("a100", a100)
	if w := r3.Wheels[0]; w.Cached || !w.Pushed || w.KeyDigest == r1.Wheels[0].KeyDigest {
		t.Errorf("arch list %s: wheel %+v, want a new key compiled", a100.FlashAttnBuild.CUDAArchs, w)
	}
	if d := wheelkey.Diff(r1.Wheels[0].Key, r3.Wheels[0].Key); strings.Join(d, ",") != "archs" {
		t.Errorf("the keys differ in %v, want archs alone", d)
	}
	if n := stepRuns(t, p3, compile); n != 1 {
		t.Errorf("a new arch list ran the compile step %d times", n)
	}
}
