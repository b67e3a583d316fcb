package buildcmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/slim"
)

func TestBuildSkipExisting(t *testing.T) {
	reg := testimage.Registry(t)
	base := func(s string) {
		img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized(s, 100)}, "gzip"))
		testimage.Push(t, reg+"/nvidia/cuda:11.8.0-"+s+"-debian12", img)
	}
	base("devel")
	base("runtime")
	f := buildRecipe(t)
	noDaemon := "unix:///nonexistent/buildkitd.sock"
	args := []string{"build", f, "--mirror", reg, "--wheel-index", "http://127.0.0.1:9/simple", "--push", reg + "/acme/app:1", "--skip-existing", "--builder", noDaemon}

	// Nothing built yet: kiln must try to build (and fail: no daemon).
	if code, _, errOut := run(t, args...); code != cmdutil.ExitFailure || !strings.Contains(errOut, "buildkitd") {
		t.Fatalf("first build: exit %d: %s", code, errOut)
	}

	// Pretend an earlier build pushed its result under the content tag.
	// The defaults: --compression both, --max-layer-size 512MiB.
	opts := &BuildOptions{IO: &cmdutil.IO{}, File: f, Flags: builder.Flags{Push: reg + "/acme/app:1", Compression: "both"}}
	opts.Mirror, opts.MirrorSet = []string{reg}, true
	opts.WheelIndexes = []string{"http://127.0.0.1:9/simple"}
	_, in, c := contentTag(t, opts)
	if c.Existing != nil || !strings.HasPrefix(c.Tag.TagStr(), "kiln-") {
		t.Fatalf("content tag %s exists before any push", c.Tag)
	}
	// What kiln build pushed carries the recipe's hash as a label: the
	// answer is checked by it.
	labels := testimage.Config{Labels: map[string]string{layers.LabelRecipeHash: in.RecipeHash}}
	built := testimage.Image(t, labels, testimage.Layer(t, []testimage.Entry{testimage.Sized("app", 10)}, "gzip"))
	testimage.Push(t, c.Tag.String(), built)
	want, _ := built.Digest()
	// Half of both is not up to date: the zstd variant's content tag too.
	if code, _, errOut := run(t, args...); code != cmdutil.ExitFailure || !strings.Contains(errOut, "buildkitd") {
		t.Fatalf("gzip content tag alone: exit %d (want a build attempt): %s", code, errOut)
	}
	builtZ := testimage.Image(t, labels, testimage.Layer(t, []testimage.Entry{testimage.Sized("app", 10)}, "zstd"))
	testimage.Push(t, layers.ZstdTag(c.Tag).String(), builtZ)
	wantZ, _ := builtZ.Digest()

	code, out, errOut := run(t, args...)
	if code != cmdutil.ExitOK || !strings.Contains(out, "up to date") {
		t.Fatalf("skip: exit %d\n%s\n%s", code, out, errOut)
	}
	img, err := testkit.OpenImage(context.Background(), reg+"/acme/app:1")
	if err != nil {
		t.Fatal(err)
	}
	img.Close()
	if img.Digest != want {
		t.Errorf("--push tag points at %s, want the existing %s", img.Digest, want)
	}
	if img, err := testkit.OpenImage(context.Background(), reg+"/acme/app:1-zstd"); err != nil || img.Digest != wantZ {
		t.Errorf("--push's zstd variant: %v, want the existing %s", err, wantZ)
	} else {
		img.Close()
	}

	// An app change is a new build.
	os.WriteFile(filepath.Join(filepath.Dir(f), "app", "main.py"), []byte("print(2)\n"), 0o644)
	if code, _, errOut := run(t, args...); code != cmdutil.ExitFailure || !strings.Contains(errOut, "buildkitd") {
		t.Errorf("after an app change: exit %d (want a build attempt): %s", code, errOut)
	}
	// So is a moved base tag.
	os.WriteFile(filepath.Join(filepath.Dir(f), "app", "main.py"), []byte("print(1)\n"), 0o644)
	if code, _, _ := run(t, args...); code != cmdutil.ExitOK {
		t.Fatalf("app restored: exit %d, want skip", code)
	}
	base("runtime-moved")
	moved, _ := remote.Get(mustRef(t, reg+"/nvidia/cuda:11.8.0-runtime-moved-debian12"))
	remote.Tag(mustTag(t, reg+"/nvidia/cuda:11.8.0-runtime-debian12"), moved)
	if code, _, _ := run(t, args...); code != cmdutil.ExitFailure {
		t.Errorf("after the runtime base moved: exit %d, want a build attempt", code)
	}
}

// reuseSetup is a recipe whose --push repository's content tags (gzip and
// zstd) hold images made with cfg, as if built from it before.
func reuseSetup(t *testing.T, cfg func(plan *recipes.Plan, in builder.Inputs) testimage.Config) (reg, f string, args []string) {
	t.Helper()
	return reuseSetupAt(t, testimage.Registry(t), cfg)
}

// reuseSetupAt is reuseSetup on the registry at reg.
func reuseSetupAt(t *testing.T, reg string, cfg func(plan *recipes.Plan, in builder.Inputs) testimage.Config) (_, f string, args []string) {
	t.Helper()
	for _, s := range []string{"devel", "runtime"} {
		img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized(s, 100)}, "gzip"))
		testimage.Push(t, reg+"/nvidia/cuda:11.8.0-"+s+"-debian12", img)
	}
	f = buildRecipe(t)
	opts := &BuildOptions{IO: &cmdutil.IO{}, File: f, Flags: builder.Flags{Push: reg + "/acme/app:1", Compression: "both"}}
	opts.Mirror, opts.MirrorSet = []string{reg}, true
	opts.WheelIndexes = []string{"http://127.0.0.1:9/simple"}
	plan, in, c := contentTag(t, opts)
	for tag, comp := range map[string]string{c.Tag.String(): "gzip", layers.ZstdTag(c.Tag).String(): "zstd"} {
		testimage.Push(t, tag, testimage.Image(t, cfg(plan, in), testimage.Layer(t, []testimage.Entry{testimage.Sized("app", 10)}, comp)))
	}
	return reg, f, []string{"build", f, "--mirror", reg, "--wheel-index", "http://127.0.0.1:9/simple", "--push", reg + "/acme/app:1", "--builder", "unix:///nonexistent/buildkitd.sock"}
}

// TestBuildReusesByDefault: a no-op rebuild with --push answers from the
// content tag without any flag (no daemon is asked: none answers here),
// says so in words and in --json; --rebuild builds; --skip-existing is a
// deprecated no-op alias, accepted without --push.
func TestBuildReusesByDefault(t *testing.T) {
	reg, f, args := reuseSetup(t, func(_ *recipes.Plan, in builder.Inputs) testimage.Config {
		return testimage.Config{Labels: map[string]string{layers.LabelRecipeHash: in.RecipeHash}}
	})
	code, out, errOut := run(t, args...)
	if code != cmdutil.ExitOK || !strings.Contains(out, "reused   "+reg+"/acme/app:kiln-") || !strings.Contains(errOut, "up to date") {
		t.Fatalf("no-op rebuild: exit %d\n%s\n%s", code, out, errOut)
	}
	code, js, errOut := run(t, append(args, "--json")...)
	var rep struct {
		Reused     bool   `json:"reused"`
		ContentTag string `json:"content_tag"`
		Digest     string `json:"digest"`
		Pushed     []struct {
			Ref, Compression, Digest string
		} `json:"pushed"`
	}
	if err := json.Unmarshal([]byte(js), &rep); code != cmdutil.ExitOK || err != nil || !rep.Reused || !strings.HasPrefix(rep.ContentTag, reg+"/acme/app:kiln-") || len(rep.Pushed) != 2 || rep.Pushed[0].Digest != rep.Digest || rep.Pushed[1].Compression != "zstd" {
		t.Fatalf("--json: exit %d %v %+v\n%s\n%s", code, err, rep, js, errOut)
	}
	if code, _, errOut := run(t, append(args, "--rebuild")...); code != cmdutil.ExitFailure || !strings.Contains(errOut, "buildkitd") {
		t.Errorf("--rebuild: exit %d (want a build attempt): %s", code, errOut)
	}
	if code, out, errOut := run(t, append(args, "--skip-existing", "--json")...); code != cmdutil.ExitOK || !strings.HasPrefix(out, "{") || !strings.Contains(out, `"reused": true`) || !strings.Contains(errOut, "deprecated") {
		t.Errorf("--skip-existing (deprecated alias): exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := run(t, "build", f, "--skip-existing", "--mirror", reg, "--wheel-index", "http://127.0.0.1:9/simple", "--builder", "unix:///nonexistent/buildkitd.sock"); code != cmdutil.ExitFailure || !strings.Contains(errOut, "buildkitd") {
		t.Errorf("--skip-existing without --push: exit %d (want a build attempt) %s", code, errOut)
	}
}

// TestBuildReuseIsChecked: a content tag whose image was not built from
// these inputs (its recipe label differs, or it has none) does not answer:
// kiln says why and builds.
func TestBuildReuseIsChecked(t *testing.T) {
	for what, labels := range map[string]map[string]string{
		"another recipe": {layers.LabelRecipeHash: "sha256:0000"},
		"no kiln labels": nil,
	} {
		_, _, args := reuseSetup(t, func(*recipes.Plan, builder.Inputs) testimage.Config { return testimage.Config{Labels: labels} })
		code, _, errOut := run(t, args...)
		if code != cmdutil.ExitFailure || !strings.Contains(errOut, "not reusing") || !strings.Contains(errOut, layers.LabelRecipeHash) || !strings.Contains(errOut, "buildkitd") {
			t.Errorf("%s: exit %d (want a build attempt, saying why): %s", what, code, errOut)
		}
	}
}

// contentTag is the --push repository's content tag of the build opts
// describe (builder.RunOptions.FindContent), with the default
// --max-layer-size.
func contentTag(t *testing.T, opts *BuildOptions) (*recipes.Plan, builder.Inputs, *builder.Content) {
	t.Helper()
	plan, in, _, dir, err := buildInputs(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	maxLayer, _ := bytesize.Parse(slim.DefaultMaxLayerSize)
	ro := builder.RunOptions{Options: builder.Options{ContextDir: dir, MaxLayerSize: maxLayer}, Plan: plan, Inputs: in, Push: testkit.Ref(t, opts.Push), Encodings: opts.Compression}
	c, err := ro.FindContent(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return plan, in, c
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustTag(t *testing.T, s string) name.Tag {
	t.Helper()
	r, err := name.NewTag(s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
