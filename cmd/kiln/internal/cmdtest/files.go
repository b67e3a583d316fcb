package cmdtest

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFile writes body to a file named name in a new temporary
// directory and returns its path.
func WriteFile(t testing.TB, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
