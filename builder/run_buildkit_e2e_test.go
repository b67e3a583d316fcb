package builder

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/layers"

	"github.com/moby/buildkit/client"

	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/sign"
)

// TestRunOnBuildKit: the whole build after the flags (kiln build --push
// REF --compression both --sbom --sign-key --explain [--format erofs]) on
// an offline recipe: the solve pushes REF and REF-zstd and tags the
// content tag, the EROFS variant goes to REF-erofs, each pushed image
// gets an SBOM referrer and a signature, and --check sees REF by digest;
// the same inputs again are answered from the content tag without a
// solve (Connect is not called), explained as the no-op.
func TestRunOnBuildKit(t *testing.T) {
	c, reg := buildkitEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stamp := time.Now().UnixNano()
	r, p := offlineAppPlan(t, ctx, reg, "run", stamp)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.py"), []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	app, err := AppDigest(p, dir)
	if err != nil {
		t.Fatal(err)
	}
	epoch := int64(1700000000)
	in := Inputs{RecipeHash: r.Hash(), SourceDateEpoch: &epoch, AppDigest: app}
	key, err := sign.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	ref := fmt.Sprintf("%s/kiln-test/run:%d", reg, stamp)
	withErofs := erofs.Check(ctx) == nil
	f := Flags{Push: ref, Compression: "both", Erofs: "lz4hc", MaxLayerSize: "0", Progress: "quiet", SBOM: true}
	if withErofs {
		f.Format = "erofs"
	}
	run := func(explain bool) (*Report, int, string) {
		t.Helper()
		f.Explain = explain
		o, _, err := f.Parse(nil)
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		connects := 0
		o.Plan, o.Inputs, o.ContextDir, o.Version, o.ProgressOut = p, in, dir, "test", &log
		o.Signer = &publish.Signer{Key: key}
		o.Connect = func(context.Context) (*client.Client, string, error) { connects++; return c, "test", nil }
		var checked string
		o.Check = func(_ context.Context, ref layers.Ref) error { checked = ref.Raw; return nil }
		rep, err := Run(ctx, *o)
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		if want := strings.Split(ref, ":")[0] + ":" + strings.Split(ref, ":")[1]; !strings.HasPrefix(checked, want+"@sha256:") {
			t.Errorf("--check saw %q, want %s@DIGEST", checked, want)
		}
		return rep, connects, log.String()
	}
	first, connects, log := run(false)
	want := 2
	if withErofs {
		want = 3
	}
	if connects != 1 || first.Reused || len(first.Pushed) != want || len(first.SBOMs) != want || len(first.Signed) != want || !strings.Contains(log, "kiln: content tag ") {
		t.Fatalf("first build: %d connects, reused %v, pushed %+v, %d SBOMs, %d signed\n%s", connects, first.Reused, first.Pushed, len(first.SBOMs), len(first.Signed), log)
	}
	if withErofs && (first.Pushed[2].Ref.String() != ref+"-erofs" || first.Pushed[2].Compression != "erofs") {
		t.Errorf("EROFS variant %+v", first.Pushed[2])
	}
	if !strings.HasPrefix(first.ContentTag, strings.SplitN(ref, ":", 3)[0]+":"+strings.SplitN(ref, ":", 3)[1]) || first.InputsDigest == "" {
		t.Errorf("content tag %q, inputs %q", first.ContentTag, first.InputsDigest)
	}
	second, connects, log := run(true)
	if connects != 0 || !second.Reused || second.Digest != first.Digest || second.ContentTag != first.ContentTag || !strings.Contains(log, "kiln: up to date") {
		t.Fatalf("same inputs again: %d connects, reused %v, digest %s (first %s)\n%s", connects, second.Reused, second.Digest, first.Digest, log)
	}
	if second.Explained == nil || !second.Explained.Reused {
		t.Errorf("--explain of the no-op: %+v", second.Explained)
	}
	var text bytes.Buffer
	second.WriteText(&text)
	if !strings.Contains(text.String(), "reused   "+second.ContentTag) || !strings.Contains(text.String(), "no-op: answered from the content tag") {
		t.Errorf("report:\n%s", text.String())
	}
}
