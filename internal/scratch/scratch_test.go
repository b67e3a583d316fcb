package scratch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// deadPID is the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

func TestDirSweepsOnlyDeadRuns(t *testing.T) {
	parent := t.TempDir()
	dead := filepath.Join(parent, "kiln-x-"+strconv.Itoa(deadPID(t))+"-123")
	live := filepath.Join(parent, "kiln-x-1-456") // pid 1 always runs
	other := filepath.Join(parent, "kiln-y-"+strconv.Itoa(deadPID(t))+"-789")
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "image"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Dir(parent, "kiln-x")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(d), "kiln-x-"+strconv.Itoa(os.Getpid())+"-") {
		t.Errorf("Dir = %s, want it named after this process", d)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead run's scratch %s was kept: %v", dead, err)
	}
	for _, keep := range []string{live, other, d} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s: %v", keep, err)
		}
	}
	// A second Dir of this process keeps the first.
	if _, err := Dir(parent, "kiln-x"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); err != nil {
		t.Errorf("this run's own scratch was swept: %v", err)
	}
}

// A --work-dir that does not exist yet is made, as slim's is (weights
// strip --work-dir NEWDIR failed on a raw stat) (issue 36 item 4).
func TestDirMakesItsParent(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "new", "work")
	d, err := Dir(parent, "kiln-x")
	if err != nil || filepath.Dir(d) != parent {
		t.Fatalf("Dir(%s) = %s, %v", parent, d, err)
	}
}
