package layers_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/layers"
)

// A committed scratch blob is named by the digest of what was written, and
// nothing else is left in the directory; Abort discards an uncommitted one
// and leaves a committed one alone.
func TestScratch(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("kiln scratch "), 200_000) // more than the write buffer
	s, err := layers.NewScratch(dir)
	if err != nil {
		t.Fatal(err)
	}
	for p := data; len(p) > 0; p = p[min(len(p), 4096):] {
		if _, err := s.Write(p[:min(len(p), 4096)]); err != nil {
			t.Fatal(err)
		}
	}
	dg, n, path, err := s.Commit()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%x", sha256.Sum256(data))
	if dg.String() != "sha256:"+want || n != int64(len(data)) || path != filepath.Join(dir, want) {
		t.Fatalf("Commit = %s %d %s, want sha256:%s %d", dg, n, path, want, len(data))
	}
	s.Abort()
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("committed blob after Abort: %v", err)
	}

	a, err := layers.NewScratch(dir)
	if err != nil {
		t.Fatal(err)
	}
	a.Write([]byte("half a blob"))
	a.Abort()
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("after Abort the directory holds %d entries, want only the committed blob", len(es))
	}
}
