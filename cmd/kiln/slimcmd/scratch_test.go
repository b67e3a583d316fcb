package slimcmd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// A slim that fails in the rewrite (a layer whose digest lies) leaves no
// scratch behind: not its temporary directory, not --work-dir's image/
// (2.1 GB after ENOSPC in the attack), and the scratch of a slim killed
// earlier (a directory named after its dead pid) is swept by the next run.
func TestSlimLeavesNoScratch(t *testing.T) {
	dir := t.TempDir()
	good := testimage.Tar(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))})
	bad := append([]byte(nil), good...)
	bad[600] ^= 1
	h, _, _ := v1SHA(good)
	img := testimage.Image(t, testimage.Config{}, testimage.Lying(bad, h, h, "application/vnd.oci.image.layer.v1.tar"))
	testimage.WriteLayout(t, dir, "bad", img)
	src := "oci:" + dir + ":bad"

	tmp := t.TempDir()
	t.Setenv("KILN_WORK_DIR", tmp)
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tmp, "kiln-slim-"+strconv.Itoa(c.Process.Pid)+"-1234")
	if err := os.MkdirAll(filepath.Join(stale, "image"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "slim", src, "--to", "oci:"+filepath.Join(dir, "out"), "--progress", "none")
	if code == 0 {
		t.Fatalf("slim of a lying layer succeeded: %s", errOut)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("scratch left in KILN_WORK_DIR: %v (stale %s)", ents, stale)
	}

	work := filepath.Join(dir, "work")
	code, _, errOut = run(t, "slim", src, "--to", "oci:"+filepath.Join(dir, "out"), "--progress", "none", "--work-dir", work)
	if code == 0 {
		t.Fatalf("slim of a lying layer succeeded: %s", errOut)
	}
	if _, err := os.Stat(filepath.Join(work, "image")); !os.IsNotExist(err) {
		t.Errorf("a failed slim kept --work-dir's image/: %v", err)
	}
}
