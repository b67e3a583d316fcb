package buildcmd

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
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
