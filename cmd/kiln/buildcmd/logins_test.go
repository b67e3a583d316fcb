package buildcmd

import (
	"encoding/json"
	"testing"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

// One kiln build --push --sign-key logs in once per repository: the base
// images' digests (the inputs digest) through one client of their
// repository, and the content tag's lookup, its answer, the read-back of
// both pushed images and their signatures through one client of the
// --push repository, whose token may push (the run's registry pool). The
// signatures logged in on their own before: three for the --push
// repository.
func TestBuildOneTokenExchangePerRepository(t *testing.T) {
	ta := testimage.TokenRegistry(t, true)
	_, _, args := reuseSetupAt(t, ta.Host(), func(_ *recipes.Plan, in builder.Inputs) testimage.Config {
		return testimage.Config{Labels: map[string]string{layers.LabelRecipeHash: in.RecipeHash}}
	})
	keys := cmdtest.NewKeys(t)
	ta.Reset()
	code, out, errOut := run(t, append(args, "--sign-key", keys.Key, "--json")...)
	var rep struct {
		Reused bool              `json:"reused"`
		Signed []json.RawMessage `json:"signed"`
	}
	if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &rep) != nil || !rep.Reused || len(rep.Signed) != 2 {
		t.Fatalf("build: exit %d, want both pushed images (gzip, zstd) reused and signed\n%s\n%s", code, out, errOut)
	}
	ex := ta.Exchanges()
	t.Logf("token exchanges per repository: %v", ex)
	if len(ex) != 2 || ex["acme/app"] != 1 || ex["nvidia/cuda"] != 1 {
		t.Errorf("token exchanges: %v, want one for acme/app and one for nvidia/cuda", ex)
	}
}
