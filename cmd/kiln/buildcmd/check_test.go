package buildcmd

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/recipes"
)

// TestCheckBuilt runs the post-build --check on an image in a registry: the
// recipe's GPUs are required, rules break with exit 3.
func TestCheckBuilt(t *testing.T) {
	reg := testimage.Registry(t)
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{
		testimage.Sized("usr/bin/python3", 1000),
		testimage.Sized("usr/lib/libfoo.a", 500),
	}, "zstd"))
	testimage.Push(t, reg+"/acme/app:1", img)
	d, _ := img.Digest()
	plan := &recipes.Plan{GPUs: []recipes.PlanGPU{{Name: "H100", ComputeCapability: "9.0"}}}
	var errOut bytes.Buffer
	opts := &BuildOptions{IO: &cmdutil.IO{Out: &bytes.Buffer{}, ErrOut: &errOut}, Flags: builder.Flags{Check: "rules.yaml", Progress: "quiet"}}
	ref := testkit.Ref(t, reg+"/acme/app@"+d.String())

	pass, _ := analyze.ParseRules("rules.yaml", []byte("forbid: [dev_tools]\n"))
	if err := checkBuilt(context.Background(), opts, plan, ref, pass); err != nil {
		t.Fatalf("passing rules: %v", err)
	}
	if !strings.Contains(errOut.String(), "passed") || !strings.Contains(errOut.String(), "H100 9.0") {
		t.Errorf("stderr = %q", errOut.String())
	}
	errOut.Reset()
	fail, _ := analyze.ParseRules("rules.yaml", []byte("forbid: [static_libs]\n"))
	err := checkBuilt(context.Background(), opts, plan, ref, fail)
	var s cmdutil.SilentExit
	if !errors.As(err, &s) || int(s) != cmdutil.ExitRule || !strings.Contains(errOut.String(), "static_libs") {
		t.Errorf("breaking rules: err %v, stderr %q", err, errOut.String())
	}
	if code, _, errText := run(t, "build", buildRecipe(t), "--check", "rules.yaml", "--mirror", reg); code != cmdutil.ExitUsage || !strings.Contains(errText, "--check needs --push or --to") {
		t.Errorf("--check without an output: %d %s", code, errText)
	}
}
