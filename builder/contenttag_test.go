package builder

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers"
)

// A no-op rebuild logs in once to the --push repository: the content
// tag's lookup (and its zstd variant's), the check of its images, the
// tagging of --push (Reuse) and of what was pushed (TagPushed) share one
// client, whose token may push.
func TestContentTagOneTokenExchange(t *testing.T) {
	ctx := context.Background()
	ta := testimage.TokenRegistry(t, false)
	plan := testPlan(t, nil)
	plan.App = nil // no app files to hash
	d := DigestInputs{Platforms: []string{"linux/amd64"}, Compression: "both", NoProbes: true,
		Resolve: func(context.Context, string) (string, error) { return "sha256:" + strings.Repeat("e", 64), nil }}
	dg, err := InputsDigest(ctx, plan, d)
	if err != nil {
		t.Fatal(err)
	}
	in := Inputs{RecipeHash: "sha256:" + strings.Repeat("a", 64), LockDigest: "sha256:" + strings.Repeat("b", 64)}
	img := testimage.Image(t, testimage.Config{Labels: map[string]string{layers.LabelRecipeHash: in.RecipeHash, layers.LabelLockDigest: in.LockDigest}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("app/main.py", 100)}, "gzip"))
	repo := ta.Host() + "/acme/app"
	for _, tag := range []string{ContentTag(dg), ContentTag(dg) + "-zstd"} {
		testimage.Push(t, repo+":"+tag, img)
	}
	ta.Reset()
	c, err := FindContent(ctx, plan, d, testkit.Ref(t, repo+":v1"), true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Existing == nil || c.ZstdExisting == nil {
		t.Fatalf("content tag %s not found: %+v", c.Tag, c)
	}
	if err := c.Verify(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if err := c.Reuse(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.TagPushed(ctx); err != nil {
		t.Fatal(err)
	}
	if ex := ta.Exchanges(); len(ex) != 1 || ex["acme/app"] != 1 {
		t.Errorf("token exchanges %v, want one, for acme/app", ex)
	}
}
