package builder

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

func mustRecord(t *testing.T, p *recipes.Plan, in Inputs) *Record {
	t.Helper()
	r, err := NewRecord(p, in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// explainOf is each step's verdict, "hit" or the reason of its miss.
func explainOf(steps []StepExplain) map[string]string {
	m := map[string]string{}
	for _, s := range steps {
		if s.Hit {
			m[s.Name] = "hit"
		} else {
			m[s.Name] = s.Why
		}
	}
	return m
}

func sourcePlan(t *testing.T, archs string, mutate func(*recipes.Recipe)) *recipes.Plan {
	p := testPlan(t, mutate)
	p.FlashAttnBuild = &recipes.FABuild{CUDAArchs: archs, MaxJobs: 2, PipFlags: []string{"--no-build-isolation"}}
	return p
}

// TestExplainNamesTheChangedInput: per step hit or miss against an
// earlier record, each miss naming the input of its own that changed or
// the step it follows, for each input a person changes.
func TestExplainNamesTheChangedInput(t *testing.T) {
	in := Inputs{RecipeHash: "sha256:r", AppDigest: "sha256:aaaa"}
	was := mustRecord(t, sourcePlan(t, "80;90", nil), in)

	same := explainOf(mustExplain(was, mustRecord(t, sourcePlan(t, "80;90", nil), in)))
	for name, v := range same {
		if v != "hit" {
			t.Errorf("unchanged inputs: %s: %s", name, v)
		}
	}

	for _, tc := range []struct {
		what    string
		now     *Record
		changed string            // the one Change's input
		want    map[string]string // step → verdict (prefix)
	}{
		{"app files", mustRecord(t, sourcePlan(t, "80;90", nil), Inputs{RecipeHash: "sha256:r", AppDigest: "sha256:bbbb"}), "app", map[string]string{
			"devel: wheels for extensions": "hit", "runtime: system packages": "hit", "runtime: install torch": "hit", "runtime: app files": "changed: app"}},
		{"apt list", mustRecord(t, sourcePlan(t, "80;90", func(r *recipes.Recipe) { r.Apt = []string{"libgomp1"} }), in), "apt", map[string]string{
			"devel: python and pip": "hit", "devel: wheels for extensions": "hit", "runtime: system packages": "changed: apt",
			"runtime: install torch": "follows runtime: system packages", "runtime: app files": "follows runtime: system packages"}},
		{"arch list", mustRecord(t, sourcePlan(t, "90", nil), in), "wheel flash-attn", map[string]string{
			"devel: python and pip": "hit", "devel: wheels for torch": "hit", "devel: compile flash-attn": "changed: wheel flash-attn",
			"runtime: system packages": "hit", "runtime: install torch": "the devel stage's wheelhouse", "runtime: install extensions": "the devel stage's wheelhouse"}},
		{"pip pin", mustRecord(t, sourcePlan(t, "80;90", func(r *recipes.Recipe) { r.Pip = []string{"numpy==2.1.0"} }), in), "pip extras", map[string]string{
			"devel: wheels for extensions": "hit", "devel: wheels for pip": "a step the earlier image did not have",
			"runtime: install extensions": "the devel stage's wheelhouse", "runtime: install pip": "a step the earlier image did not have"}},
	} {
		steps, changes := Explain(was, tc.now)
		if len(changes) != 1 || changes[0].Input != tc.changed {
			t.Errorf("%s: changes %+v, want one, %s", tc.what, changes, tc.changed)
		}
		got := explainOf(steps)
		for step, want := range tc.want {
			if !strings.HasPrefix(got[step], want) {
				t.Errorf("%s: %s: %q, want %q", tc.what, step, got[step], want)
			}
		}
	}
	_, ch := Explain(was, mustRecord(t, sourcePlan(t, "90", nil), in))
	if len(ch) == 1 && ch[0].What != "archs 80;90 → 90" {
		t.Errorf("arch change in words: %q", ch[0].What)
	}
	_, ch = Explain(mustRecord(t, sourcePlan(t, "80;90", func(r *recipes.Recipe) { r.Pip = []string{"numpy==2.0.0", "einops==0.8.0"} }), in),
		mustRecord(t, sourcePlan(t, "80;90", func(r *recipes.Recipe) { r.Pip = []string{"numpy==2.1.0", "rich==13.0"} }), in))
	if len(ch) != 1 || ch[0].What != "-einops==0.8.0, numpy==2.0.0 → numpy==2.1.0, +rich==13.0" {
		t.Errorf("pin change in words: %+v", ch)
	}
}

func mustExplain(was, now *Record) []StepExplain {
	s, _ := Explain(was, now)
	return s
}

// TestExplainHandMadeRecords: a record read from a label (as an older or
// another kiln wrote it) compares by its fields: a moved base, and an
// image with no record, and none at all.
func TestExplainHandMadeRecords(t *testing.T) {
	was, err := ParseRecord(`{"v":1,"bases":{"devel":"r/cuda:devel","runtime":"r/cuda@sha256:1111"},"apt":["curl"],
		"steps":[{"name":"devel: python and pip","own":"a","chain":"a1"},{"name":"runtime: system packages","own":"b","chain":"b1"},{"name":"runtime: app files","own":"c","chain":"c1"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	now := &Record{V: 1, Bases: map[string]string{"devel": "r/cuda:devel", "runtime": "r/cuda@sha256:2222"}, Apt: []string{"curl"},
		Steps: []StepRecord{{Name: "devel: python and pip", Own: "a", Chain: "a1"}, {Name: "runtime: system packages", Own: "b", Chain: "b2"}, {Name: "runtime: app files", Own: "c", Chain: "c2"}}}
	steps, changes := Explain(was, now)
	got := explainOf(steps)
	if got["devel: python and pip"] != "hit" || got["runtime: system packages"] != "base image changed: r/cuda@sha256:1111 → r/cuda@sha256:2222" || got["runtime: app files"] != "follows runtime: system packages" {
		t.Errorf("moved runtime base: %q", got)
	}
	if len(changes) != 1 || changes[0].Input != "base runtime" {
		t.Errorf("changes %+v", changes)
	}
	if _, err := ParseRecord(`{"v":2,"steps":[]}`); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("a newer record: %v", err)
	}

	none := (&Against{Ref: "r/app:1"}).Explain(now)
	if !strings.Contains(none.Note, "no image at r/app:1") || none.AppOnly || len(none.Steps) != 3 || none.Steps[0].Hit {
		t.Errorf("no earlier image: %+v", none)
	}
	foreign := (&Against{Ref: "r/app:1", Digest: "sha256:ff"}).Explain(now)
	if !strings.Contains(foreign.Note, "no kiln record") {
		t.Errorf("an image without a record: %+v", foreign)
	}
	app := *was
	app.App = "sha256:aa"
	appNow := *was
	appNow.App = "sha256:bb"
	if e := (&Against{Ref: "r/app:1", Digest: "sha256:ff", Record: &app}).Explain(&appNow); !e.AppOnly {
		t.Errorf("an app-only change: %+v", e)
	}
}

// TestExplainCost: the cost of a build against the earlier image counts
// the layers it lacks (content-addressed: a same layer is neither pushed
// nor pulled again), per variant for the push, the --push tag's for the
// pull; and the earlier image is read with its kiln record.
func TestExplainCost(t *testing.T) {
	reg := testimage.Registry(t)
	rec := `{"v":1,"bases":{},"steps":[]}`
	base := testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/lib/libbig.so", 4000)}, "gzip")
	oldApp := testimage.Layer(t, []testimage.Entry{testimage.Sized("app/main.py", 300)}, "gzip")
	newApp := testimage.Layer(t, []testimage.Entry{testimage.Sized("app/main2.py", 500)}, "gzip")
	testimage.Push(t, reg+"/acme/app:1", testimage.Image(t, testimage.Config{Labels: map[string]string{layers.LabelInputs: rec}}, base, oldApp))
	a, err := ReadAgainst(context.Background(), testkit.Ref(t, reg+"/acme/app:1"))
	if err != nil || a.Digest == "" || a.Record == nil || len(a.Layers) != 2 {
		t.Fatalf("ReadAgainst: %+v, %v", a, err)
	}
	built := testimage.Image(t, testimage.Config{}, base, newApp)
	testimage.Push(t, reg+"/acme/app:1", built)
	d, _ := built.Digest()
	e := &Explanation{}
	if err := a.Measure(context.Background(), e, []Pushed{{Ref: testkit.Ref(t, reg+"/acme/app:1"), Compression: "gzip", Digest: d.String()}}); err != nil {
		t.Fatal(err)
	}
	newSize, _ := newApp.Size()
	baseSize, _ := base.Size()
	if c := e.Cost; c == nil || c.Layers != 2 || c.NewLayers != 1 || c.PushBytes != newSize || c.PullBytes != newSize || c.SameBytes != baseSize {
		t.Errorf("cost %+v, want 1 of 2 layers new, %d bytes, %d same", e.Cost, newSize, baseSize)
	}
	if a, err := ReadAgainst(context.Background(), testkit.Ref(t, reg+"/acme/none:1")); err != nil || a.Digest != "" {
		t.Errorf("no image: %+v, %v", a, err)
	}
}

// A pip_from_source requirement's new pin: the explainer names its wheel
// as the input that changed, its compile step misses for it, and the
// other compile step (FlashAttention's) hits.
func TestExplainSourceRequirement(t *testing.T) {
	in := Inputs{RecipeHash: "sha256:r", AppDigest: "sha256:aaaa"}
	plan := func(version string) *recipes.Plan {
		return sourcePlan(t, "80;90", func(r *recipes.Recipe) {
			r.Pip = []string{"kiln-demo-ext==" + version}
			r.PipFromSource = []string{"kiln-demo-ext"}
		})
	}
	steps, changes := Explain(mustRecord(t, plan("1.0"), in), mustRecord(t, plan("1.1"), in))
	var inputs []string
	for _, c := range changes {
		inputs = append(inputs, c.Input)
	}
	if !strings.Contains(strings.Join(inputs, ","), "wheel kiln-demo-ext") {
		t.Errorf("changes %+v, want the wheel kiln-demo-ext", changes)
	}
	got := explainOf(steps)
	if v := got["devel: compile kiln-demo-ext"]; !strings.Contains(v, "wheel kiln-demo-ext") {
		t.Errorf("compile step: %q, want a miss naming its wheel", v)
	}
	if v := got["devel: compile flash-attn"]; v != "hit" {
		t.Errorf("flash-attn's compile step: %q, want a hit", v)
	}
}

// N10: --explain-against reads the earlier image's config bounded (the
// limit every manifest and config read has, 64 MiB), not whatever size the
// registry serves (a 300 MiB config took 2 GB): a manifest naming a config
// past it is refused in words before a byte of it is read.
func TestReadAgainstBoundsConfig(t *testing.T) {
	reg := testimage.Registry(t)
	m := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[]}`, strings.Repeat("ab", 32), 300<<20)
	r, err := name.ParseReference(reg+"/acme/huge:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(r, rawManifest(m)); err != nil {
		t.Fatal(err)
	}
	if a, err := ReadAgainst(context.Background(), testkit.Ref(t, reg+"/acme/huge:1")); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a 300 MiB config: %+v, %v; want it refused", a, err)
	}
}

type rawManifest string

func (m rawManifest) RawManifest() ([]byte, error) { return []byte(m), nil }
func (m rawManifest) MediaType() (types.MediaType, error) {
	return types.OCIManifestSchema1, nil
}

// TestExplainAgainstThePlatformBuilt: --explain-against an index compares
// with the image of the platform being built (its record), not the
// index's first.
func TestExplainAgainstThePlatformBuilt(t *testing.T) {
	reg := testimage.Registry(t)
	l := testimage.Layer(t, []testimage.Entry{testimage.Sized("app/main.py", 300)}, "gzip")
	amd := testimage.Image(t, testimage.Config{Labels: map[string]string{layers.LabelInputs: `{"v":1,"bases":{"devel":"amd64's"},"steps":[]}`}}, l)
	cf, err := amd.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = "arm64"
	cf.Config.Labels[layers.LabelInputs] = `{"v":1,"bases":{"devel":"arm64's"},"steps":[]}`
	arm, err := mutate.ConfigFile(amd, cf)
	if err != nil {
		t.Fatal(err)
	}
	testimage.PushIndex(t, reg+"/acme/app:1", testimage.Index(t, amd, arm))
	for _, p := range []string{"linux/arm64", "linux/amd64"} {
		want := strings.TrimPrefix(p, "linux/") + "'s"
		o := &RunOptions{Options: Options{Platforms: []string{p}}, Plan: testPlan(t, nil), Explain: true, ExplainAgainst: testkit.Ref(t, reg+"/acme/app:1")}
		e, err := o.startExplain(context.Background())
		if err != nil || e.against.Record == nil || e.against.Record.Bases["devel"] != want {
			t.Fatalf("building %s: %v; compared with the record %+v, want %s", p, err, e.against.Record, want)
		}
	}
}
