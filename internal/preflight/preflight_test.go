package preflight

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestDisk(t *testing.T) {
	dir := t.TempDir()
	free, err := Free(dir)
	if err != nil || free <= 0 {
		t.Fatalf("Free: %d %v", free, err)
	}
	// A directory not made yet is measured where it would be made.
	if err := Disk(filepath.Join(dir, "not", "yet"), 1, "scratch"); err != nil {
		t.Errorf("1 byte: %v", err)
	}
	err = Disk(dir, free+1<<40, "the slimmed layers")
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "the slimmed layers needs about") {
		t.Errorf("more than free: %v", err)
	}
}

// Two needs on one file system are added up: each fits alone, both do not
// (slim's work directory and an oci: destination on one disk).
func TestDisksAddsUpOneFileSystem(t *testing.T) {
	a, b := t.TempDir(), filepath.Join(t.TempDir(), "not-yet")
	free, err := Free(a)
	if err != nil {
		t.Fatal(err)
	}
	half := free/2 + 1<<20
	if err := Disks(Need{Dir: a, Bytes: half, What: "the slimmed layers"}); err != nil {
		t.Fatalf("one need that fits: %v", err)
	}
	err = Disks(Need{Dir: a, Bytes: half, What: "the slimmed layers"}, Need{Dir: b, Bytes: half, What: "the image written to --to"})
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("two needs over the free space of one file system: %v", err)
	}
	for _, w := range []string{"the slimmed layers", "the image written to --to", a, b, "in all"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not name %q: %v", w, err)
		}
	}
}
