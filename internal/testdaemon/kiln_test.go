package testdaemon

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// KilnBinary builds kiln once: a second call returns the same file,
// untouched, and it runs.
func TestKilnBinaryBuildsOnce(t *testing.T) {
	SkipShort(t)
	a := KilnBinary(t)
	fa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	b := KilnBinary(t)
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	if a != b || !fa.ModTime().Equal(fb.ModTime()) || !os.SameFile(fa, fb) {
		t.Errorf("second call: %s (%v), first %s (%v)", b, fb.ModTime(), a, fa.ModTime())
	}
	out, err := exec.Command(a, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kiln") {
		t.Errorf("kiln version: %v %s", err, out)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveKilnBinary()
	os.Exit(code)
}
