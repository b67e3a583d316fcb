package builder

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kiln-build/kiln/recipes/wheelkey"
)

// What the cache did, a line per wheel within 80 columns; a wheel that
// did not reach the cache is a warning with the reason.
func TestWriteWheels(t *testing.T) {
	k := wheelkey.Key{Package: "flash-attn", Archs: []string{"80", "90"}}
	ref := "registry.example.com:5000/acme/ml-platform/wheels:" + k.Tag()
	uses := []WheelUse{
		{Package: "flash-attn", Platform: "linux/amd64", Key: k, Cached: true, Ref: ref, Size: 41 << 20},
		{Package: "flash-attn", Platform: "linux/arm64", Key: k, Pushed: true, Ref: ref, Size: 40 << 20},
		{Package: "flash-attn", Platform: "linux/arm64/v8", Key: k, Note: "compiled, but not pushed to the wheel cache: denied"},
	}
	var out, errOut bytes.Buffer
	WriteWheels(&out, uses)
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
