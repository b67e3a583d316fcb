package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// names lists dir's entries: a finished write leaves only the destination.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name string
		old  []byte // nil: no file before
		perm os.FileMode
	}{
		{name: "new file", perm: 0o644},
		{name: "replaces", old: []byte("old content, longer than the new"), perm: 0o644},
		{name: "private", old: []byte("x"), perm: 0o600},
		{name: "executable", perm: 0o755},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "index.json")
			if tc.old != nil {
				if err := os.WriteFile(p, tc.old, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteFile(p, []byte("new"), tc.perm); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil || string(b) != "new" {
				t.Fatalf("content %q, %v", b, err)
			}
			st, _ := os.Stat(p)
			if st.Mode().Perm() != tc.perm {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), tc.perm)
			}
			if n := names(t, dir); len(n) != 1 {
				t.Errorf("dir holds %v, want only index.json", n)
			}
		})
	}
}

// TestWriteFileNoDir: a missing directory is an error and creates nothing.
func TestWriteFileNoDir(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "f")
	if err := WriteFile(p, []byte("x"), 0o644); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want not exist", err)
	}
}

// TestCreateAbortKeepsOld: an abandoned stream (an interrupted run) leaves
// the old file whole and no temporary file behind; until Commit the
// destination does not change.
func TestCreateAbortKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "app.tar")
	os.WriteFile(p, []byte("old"), 0o644)
	f, err := Create(p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("half of the new"))
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("destination changed before Commit: %q", b)
	}
	f.Abort()
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("destination after Abort: %q", b)
	}
	if n := names(t, dir); len(n) != 1 {
		t.Errorf("dir holds %v after Abort", n)
	}
}

// TestCreateCommit: Commit replaces the file; Abort after it and a second
// Commit do not undo it.
func TestCreateCommit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "app.tar")
	os.WriteFile(p, []byte("old"), 0o644)
	f, err := Create(p, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		f.Write([]byte("part "))
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort()
	if err := f.Commit(); err == nil {
		t.Error("second Commit succeeded")
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "part part part " || st.Mode().Perm() != 0o640 {
		t.Errorf("content %q mode %v", b, st.Mode().Perm())
	}
	if n := names(t, dir); len(n) != 1 {
		t.Errorf("dir holds %v after Commit", n)
	}
}
