package localfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFileRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "key.pub")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
	}{
		// Opening a FIFO for reading blocks until a writer comes; kiln
		// must refuse it at once (this test would hang otherwise).
		{fifo, "named pipe"},
		{"/dev/zero", "character device"},
		{dir, "directory"},
	} {
		_, err := ReadFile(tc.path, "key", MaxKey)
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %v", tc.path, err)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), "key", MaxKey); !os.IsNotExist(err) && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

func TestReadFileBounds(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "index.json")
	// A sparse 4 GiB file: refused from its size, nothing read.
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(4 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := ReadFile(big, "index.json", MaxIndex); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "index.json") {
		t.Fatalf("4 GiB index: %v", err)
	}
	ok := filepath.Join(dir, "ok")
	os.WriteFile(ok, []byte("hello"), 0o600)
	b, err := ReadFile(ok, "key", 5)
	if err != nil || string(b) != "hello" {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := ReadFile(ok, "key", 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the bound by one: %v", err)
	}
}
