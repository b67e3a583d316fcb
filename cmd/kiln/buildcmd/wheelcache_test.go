package buildcmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers/publish"
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

// What the cache did, a line per wheel within 80 columns; a wheel that
// did not reach the cache is a warning with the reason.
func TestWriteWheels(t *testing.T) {
	k := wheelcache.Key{Package: "flash-attn", Archs: []string{"80", "90"}}
	ref := "registry.example.com:5000/acme/ml-platform/wheels:" + k.Tag()
	uses := []builder.WheelUse{
		{Package: "flash-attn", Platform: "linux/amd64", Key: k, Cached: true, Ref: ref, Size: 41 << 20},
		{Package: "flash-attn", Platform: "linux/arm64", Key: k, Pushed: true, Ref: ref, Size: 40 << 20},
		{Package: "flash-attn", Platform: "linux/arm64/v8", Key: k, Note: "compiled, but not pushed to the wheel cache: denied"},
	}
	var out, errOut bytes.Buffer
	writeWheels(&out, uses)
	warnWheels(&errOut, uses)
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if utf8.RuneCountInString(l) > 80 {
			t.Errorf("%d columns: %s", utf8.RuneCountInString(l), l)
		}
	}
	for _, want := range []string{"from the cache, 41.0 MiB, not compiled", "compiled, pushed", "compiled, not cached"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "warning: flash-attn linux/arm64/v8: compiled, but not pushed") || strings.Count(errOut.String(), "\n") != 1 {
		t.Errorf("warnings:\n%s", errOut.String())
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
	k := wheelcache.Key{Package: "flash-attn", Version: "2.7.4.post1", Source: "sha256:" + strings.Repeat("ab", 32),
		Torch: "2.6.0", TorchCUDA: "cu124", CUDA: "12.4.1", Python: "3.12", PythonABI: "cp312", CXX11ABI: "1",
		Platform: "linux/amd64", Archs: []string{"90"}, Builder: "b"}
	whl := filepath.Join(t.TempDir(), "flash_attn-2.7.4.post1-cp312-cp312-linux_x86_64.whl")
	os.WriteFile(whl, []byte("wheel"), 0o644)
	e, err := c.Push(ctx, k, whl)
	if err != nil {
		t.Fatal(err)
	}
	ks := cmdtest.NewKeys(t)
	f := cmdutil.WheelCacheFlags{VerifyKey: ks.Pub}
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
