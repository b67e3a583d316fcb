package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/recipes"
)

// TestExplainOnBuildKit: an offline recipe built and pushed, then its app
// file changed: --explain's comparison with the tag's last push names
// the app files as the one change and the app step as the one miss, and
// the second push costs exactly one new layer (content-addressed: every
// other layer is the same blob, pushed and pulled once); against itself
// every step hits.
func TestExplainOnBuildKit(t *testing.T) {
	c, reg := buildkitEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stamp := time.Now().UnixNano()
	r, p := offlineAppPlan(t, ctx, reg, "explain", stamp)
	dir := t.TempDir()
	epoch := int64(1700000000)
	ref := fmt.Sprintf("%s/kiln-test/explain:%d", reg, stamp)
	build := func(body string) (Inputs, *Result) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "app.py"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		app, err := AppDigest(p, dir)
		if err != nil {
			t.Fatal(err)
		}
		in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch, AppDigest: app}
		res, err := Build(ctx, p, in, Options{Client: c, ContextDir: dir, Progress: "quiet", Outputs: []Output{mustOutput(t, ref)}})
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		return in, res
	}
	build("print(1)\n")

	in2 := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch}
	os.WriteFile(filepath.Join(dir, "app.py"), []byte("print(2)  # changed\n"), 0o644)
	var err error
	if in2.AppDigest, err = AppDigest(p, dir); err != nil {
		t.Fatal(err)
	}
	a, err := ReadAgainst(ctx, testkit.Ref(t, ref))
	if err != nil || a.Record == nil {
		t.Fatalf("the first push, read back: %+v %v", a, err)
	}
	e := a.Explain(mustRecord(t, p, in2))
	if len(e.Changes) != 1 || e.Changes[0].Input != "app" || !e.AppOnly {
		t.Errorf("changes %+v (app only %v), want the app files alone", e.Changes, e.AppOnly)
	}
	for _, s := range e.Steps {
		if want := s.Name != "runtime: app files"; s.Hit != want {
			t.Errorf("step %s: hit %v (%s)", s.Name, s.Hit, s.Why)
		}
	}
	_, res := build("print(2)  # changed\n")
	if err := a.Measure(ctx, e, res.Pushed); err != nil {
		t.Fatal(err)
	}
	if e.Cost == nil || e.Cost.NewLayers != 1 || e.Cost.PushBytes != e.Cost.PullBytes || e.Cost.PushBytes <= 0 || e.Cost.SameBytes <= e.Cost.PushBytes {
		t.Errorf("an app change costs %+v, want one new (app) layer", e.Cost)
	}
	t.Logf("app change: %d of %d layers new, %d B to push, %d B unchanged", e.Cost.NewLayers, e.Cost.Layers, e.Cost.PushBytes, e.Cost.SameBytes)

	self, err := ReadAgainst(ctx, testkit.Ref(t, ref))
	if err != nil {
		t.Fatal(err)
	}
	same := self.Explain(mustRecord(t, p, in2))
	for _, s := range same.Steps {
		if !s.Hit {
			t.Errorf("against itself: step %s missed: %s", s.Name, s.Why)
		}
	}
}

// offlineAppPlan is a recipe NAME that ships one app file (app.py as
// /app/main.py), resolved and set on a small Debian base with the
// recipe's Python (dfBase) pushed to reg for it: a build that needs no
// fixture image and no wheel index.
func offlineAppPlan(t *testing.T, ctx context.Context, reg, name string, stamp int64) (*recipes.Recipe, *recipes.Plan) {
	t.Helper()
	r, err := recipes.Parse("kiln.yaml", []byte("name: "+name+"\ncuda: \"12.4\"\napp:\n  files:\n    - {src: app.py, dst: /app/main.py}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := recipes.Resolve(ctx, r, recipes.WithMirror(reg))
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("%s/kiln-test/%s-base:%d", reg, name, stamp)
	dfBase(t, base, p.Python)
	p.BaseImages.Devel, p.BaseImages.Runtime = base, base
	return r, p
}
