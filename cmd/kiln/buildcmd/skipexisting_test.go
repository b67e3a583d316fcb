package buildcmd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
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
	opts := &BuildOptions{IO: &cmdutil.IO{}, File: f, Push: reg + "/acme/app:1", Compression: "both"}
	opts.Mirror, opts.MirrorSet = reg, true
	opts.WheelIndexes = []string{"http://127.0.0.1:9/simple"}
	plan, in, dir, err := buildInputs(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	maxLayer, _ := bytesize.Parse(slim.DefaultMaxLayerSize)
	c, err := findContentTag(context.Background(), opts, plan, in, dir, maxLayer)
	if err != nil {
		t.Fatal(err)
	}
	if c.Existing != nil || !strings.HasPrefix(c.Tag.TagStr(), "kiln-") {
		t.Fatalf("content tag %s exists before any push", c.Tag)
	}
	built := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("app", 10)}, "gzip"))
	testimage.Push(t, c.Tag.String(), built)
	want, _ := built.Digest()
	// Half of both is not up to date: the zstd variant's content tag too.
	if code, _, errOut := run(t, args...); code != cmdutil.ExitFailure || !strings.Contains(errOut, "buildkitd") {
		t.Fatalf("gzip content tag alone: exit %d (want a build attempt): %s", code, errOut)
	}
	builtZ := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("app", 10)}, "zstd"))
	testimage.Push(t, layers.ZstdTag(c.Tag).String(), builtZ)
	wantZ, _ := builtZ.Digest()

	code, out, errOut := run(t, args...)
	if code != cmdutil.ExitOK || !strings.Contains(out, "up to date") {
		t.Fatalf("skip: exit %d\n%s\n%s", code, out, errOut)
	}
	img, err := layers.Open(context.Background(), reg+"/acme/app:1")
	if err != nil {
		t.Fatal(err)
	}
	img.Close()
	if img.Digest != want {
		t.Errorf("--push tag points at %s, want the existing %s", img.Digest, want)
	}
	if img, err := layers.Open(context.Background(), reg+"/acme/app:1-zstd"); err != nil || img.Digest != wantZ {
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
	if code, _, errOut := run(t, "build", f, "--skip-existing", "--mirror", reg); code != cmdutil.ExitUsage || !strings.Contains(errOut, "needs --push") {
		t.Errorf("--skip-existing without --push: exit %d %s", code, errOut)
	}
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
