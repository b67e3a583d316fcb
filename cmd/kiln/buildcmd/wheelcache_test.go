package buildcmd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/recipes/wheelkey"
	"github.com/kiln-build/kiln/sign"
)

// --wheel-cache names a repository: a tag or digest is a usage error
// that says what to write, before any work.
func TestWheelCacheFlagRefusesATag(t *testing.T) {
	f := buildRecipe(t)
	code, _, errText := run(t, "build", f, "--dry-run", "--wheel-cache", "127.0.0.1:5000/kiln/wheels:v1")
	if code != cmdutil.ExitUsage || !strings.Contains(errText, "without a tag or digest") {
		t.Errorf("exit %d: %s", code, errText)
	}
	if code, out, errText := run(t, "build", f, "--dry-run", "--wheel-cache", "127.0.0.1:5000/kiln/wheels"); code != 0 {
		t.Errorf("a repository: exit %d %s %s", code, out, errText)
	}
}

// N4: --wheel-cache-verify-key takes a cached wheel only when its
// artifact is signed under the key (kiln build --sign-key signs the wheels
// it pushes, through the same publish path as images): an unsigned wheel,
// or one signed by another key, is refused in words.
func TestWheelCacheVerifier(t *testing.T) {
	ctx := context.Background()
	reg, _ := testimage.ReferrersRegistry(t)
	repo := strings.SplitN(reg, "/", 2)[0] + "/kiln/wheels"
	c, err := wheelcache.Open(repo)
	if err != nil {
		t.Fatal(err)
	}
	k := wheelkey.Key{Package: "flash-attn", Version: "2.7.4.post1", Source: "sha256:" + strings.Repeat("ab", 32),
		Torch: "2.6.0", TorchCUDA: "cu124", CUDA: "12.4.1", Python: "3.12", PythonABI: "cp312", CXX11ABI: "1",
		Platform: "linux/amd64", Archs: []string{"90"}, Builder: "b"}
	whl := filepath.Join(t.TempDir(), "flash_attn-2.7.4.post1-cp312-cp312-linux_x86_64.whl")
	os.WriteFile(whl, []byte("wheel"), 0o644)
	e, err := c.Push(ctx, k, whl)
	if err != nil {
		t.Fatal(err)
	}
	ks := cmdtest.NewKeys(t)
	f := verbkit.WheelCacheFlags{VerifyKey: ks.Pub}
	verify, err := f.Verifier(c)
	if err != nil || verify == nil {
		t.Fatalf("Verifier: %v", err)
	}
	hit, err := c.Lookup(ctx, k)
	if err != nil || hit == nil {
		t.Fatalf("lookup: %+v %v", hit, err)
	}
	if err := verify(ctx, hit); err == nil || !strings.Contains(err.Error(), "--wheel-cache-verify-key") {
		t.Errorf("an unsigned wheel: %v, want it refused", err)
	}
	var opts BuildOptions
	other := cmdtest.NewKeys(t)
	for _, tc := range []struct {
		name string
		key  *sign.Signer
		ok   bool
	}{{"another key", other.Signer, false}, {"the key", ks.Signer, true}} {
		pub := publish.WithSign(publish.Writer(), opts.SignFlag.Signer(tc.key, nil))
		d, _ := v1.NewHash(e.Manifest)
		if _, err := pub.Publish(ctx, publish.Pushed(d), e.Ref); err != nil {
			t.Fatal(err)
		}
		if err := verify(ctx, hit); (err == nil) != tc.ok {
			t.Errorf("signed by %s: %v", tc.name, err)
		}
	}
}
