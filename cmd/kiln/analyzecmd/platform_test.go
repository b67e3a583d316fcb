package analyzecmd

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// --platform linux/arm64 on an amd64-only image was silently analyzed as
// amd64; given, --platform is refused with the platform the image has.
// Without --platform (or with the image's own) it is analyzed as before.
func TestAnalyzePlatformMismatchRefused(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 100)}, "gzip"))
	testimage.WriteLayout(t, filepath.Join(dir, "lay"), "app", img)
	testimage.WriteArchive(t, filepath.Join(dir, "a.tar"), "kiln/app:1", img)
	reg := testimage.Registry(t)
	testimage.Push(t, reg+"/amd/only:1", img)
	for _, ref := range []string{"oci:" + filepath.Join(dir, "lay") + ":app", "docker-archive:" + filepath.Join(dir, "a.tar"), reg + "/amd/only:1"} {
		code, out, errOut := run(t, "analyze", ref, "--platform", "linux/arm64")
		if code == 0 || !strings.Contains(errOut, "single-platform image for linux/amd64") {
			t.Errorf("%s --platform linux/arm64: exit %d, stderr %q, stdout %q", ref, code, errOut, out)
		}
		for _, args := range [][]string{{"analyze", ref}, {"analyze", ref, "--platform", "linux/amd64"}} {
			if code, _, errOut := run(t, args...); code != 0 {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
		}
	}
}
