package slimcmd

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
)

// slim --to oci:DIR on a file system too small for the image is refused
// by the preflight, in words naming the destination, before the rewrite
// (issue 36: it failed after the rewrite with a garbled blob path).
func TestSlimOCIDestinationSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	big := make([]byte, 3<<20) // random: gzip does not shrink it
	rand.Read(big)
	layer := testimage.Layer(t, []testimage.Entry{testimage.File("srv/model.bin", big), testimage.File("etc/a", []byte("a"))}, "gzip")
	testimage.WriteLayout(t, dir, "app", testimage.Image(t, testimage.Config{}, layer))

	small := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", small).Run() })
	work := filepath.Join(dir, "work")
	code, _, errOut := run(t, "slim", "oci:"+dir+":app", "--to", "oci:"+filepath.Join(small, "out"), "--compression", "gzip", "--progress", "none", "--work-dir", work)
	if code != cmdutil.ExitFailure {
		t.Fatalf("slim into 2 MiB: exit %d: %s", code, errOut)
	}
	for _, w := range []string{"not enough disk space", "the image written to --to oci:" + filepath.Join(small, "out")} {
		if !strings.Contains(errOut, w) {
			t.Errorf("error does not say %q: %s", w, errOut)
		}
	}
	if ents, _ := os.ReadDir(small); len(ents) != 0 {
		t.Errorf("written to the destination before the refusal: %v", ents)
	}
}
