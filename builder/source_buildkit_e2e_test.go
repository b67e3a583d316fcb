package builder

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kiln-build/kiln/builder/internal/wheelserve"
	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelindex"
)

// TestSourceRequirementOnBuildKit: a recipe whose one pip requirement
// publishes only a source archive (a C extension) builds on the real
// BuildKit with pip_from_source: the devel stage compiles it (pushed to
// the wheel cache), the runtime image imports and calls it (the probe),
// and the next build takes the wheel from the cache (its compile step
// does not run) and gives the same image.
//
// The devel stage installs a compiler from Debian (minutes): it runs in
// make e2e-slow (KILN_SLOW_E2E=1).
func TestSourceRequirementOnBuildKit(t *testing.T) {
	if os.Getenv("KILN_SLOW_E2E") != "1" {
		t.Skip("a compiler installed from Debian in the devel stage: run with make e2e-slow (KILN_SLOW_E2E=1)")
	}
	c, reg := buildkitEnv(t, "12.4.1-devel-debian13", "12.4.1-runtime-debian13")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	idx := e2eIndex(t)
	demo := wheelserve.DemoExtName
	r, err := recipes.Parse("kiln.yaml", []byte(fmt.Sprintf(`name: demo-ext
cuda: 12.4.1
cudnn: none
os: debian13
python: "3.13"
runtime_base: runtime
pip: [%s==%s]
pip_from_source: [%s]
test:
  - python3 -c "import kiln_demo_ext; assert kiln_demo_ext.crc32(b'kiln') == 3911661381"
`, demo, wheelserve.DemoExtVersion, demo)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg), recipes.WithWheelIndexes(idx))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := wheelcache.Open(fmt.Sprintf("%s/kiln-e2e/wheels-%d", reg, time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	repo := reg + "/kiln-e2e/source-requirement"
	compile := "devel: compile " + demo
	build := func(tag string) (*Result, []byte) {
		t.Helper()
		var progress bytes.Buffer
		start := time.Now()
		res, err := Build(ctx, p, in, Options{
			Client: c, ContextDir: t.TempDir(), Progress: "rawjson", ProgressOut: &progress,
			Outputs:    []Output{mustOutput(t, repo+":"+tag)},
			WheelCache: &WheelCache{Cache: cache, Index: &wheelindex.Client{}},
		})
		if err != nil {
			t.Fatalf("build %s: %v", tag, err)
		}
		if len(res.Wheels) != 1 || res.Wheels[0].Package != demo {
			t.Fatalf("build %s: wheels %+v", tag, res.Wheels)
		}
		t.Logf("build %s: %s in %s; wheel %+v", tag, res.Digest, time.Since(start).Round(time.Millisecond), res.Wheels[0])
		return res, progress.Bytes()
	}
	r1, p1 := build("compiled")
	if w := r1.Wheels[0]; w.Cached || !w.Pushed || w.Size == 0 {
		t.Fatalf("first build: wheel %+v, want compiled and pushed", w)
	}
	if n := stepRuns(t, p1, compile); n != 1 {
		t.Errorf("first build ran %q %d times", compile, n)
	}
	r2, p2 := build("cached")
	if w := r2.Wheels[0]; !w.Cached || w.Digest != r1.Wheels[0].Digest {
		t.Errorf("second build: wheel %+v, want the pushed one from the cache", w)
	}
	if n := stepRuns(t, p2, compile); n != 0 {
		t.Errorf("second build ran %q %d times", compile, n)
	}
	if r2.Digest != r1.Digest {
		t.Errorf("the cached wheel gave another image: %s vs %s", r2.Digest, r1.Digest)
		diffLayers(t, ctx, repo+"@"+r1.Digest, repo+"@"+r2.Digest)
	}
}
