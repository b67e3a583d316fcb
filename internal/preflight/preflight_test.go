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
