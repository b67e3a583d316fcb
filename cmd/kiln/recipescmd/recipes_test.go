package recipescmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/termtable"
)

func TestRecipesCommands(t *testing.T) {
	code, out, _ := run(t, "recipes", "list")
	for _, n := range []string{"torch25-cu124", "torch27-cu128-blackwell", "cuda13-torch29", "debian-cuda11.8"} {
		if !strings.Contains(out, n) {
			t.Errorf("list lacks %s:\n%s", n, out)
		}
	}
	if code != 0 {
		t.Errorf("list exit %d", code)
	}
	if code, out, _ := run(t, "recipes", "list", "--json"); code != 0 || !strings.Contains(out, `"name": "debian-cuda11.8"`) {
		t.Errorf("list --json: %d %s", code, out)
	}
	code, out, _ = run(t, "recipes", "show", "debian-cuda11.8")
	if code != 0 || !strings.Contains(out, "os: debian12") {
		t.Errorf("show: %d %s", code, out)
	}
	if code, _, errOut := run(t, "recipes", "show", "nope"); code != 2 || !strings.Contains(errOut, "torch25-cu124") {
		t.Errorf("show nope: %d %s", code, errOut)
	}
	dir := t.TempDir()
	dst := filepath.Join(dir, "kiln.yaml")
	if code, out, errOut := run(t, "recipes", "init", "torch25-cu124", "-o", dst); code != 0 || !strings.Contains(out, "wrote") {
		t.Fatalf("init: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := run(t, "recipes", "init", "cuda13-torch29", "-o", dst); code != 1 || !strings.Contains(errOut, "--force") {
		t.Errorf("init over existing: %d %s", code, errOut)
	}
	if code, _, _ := run(t, "recipes", "init", "cuda13-torch29", "-o", dst, "--force"); code != 0 {
		t.Errorf("init --force: %d", code)
	}
	b, _ := os.ReadFile(dst)
	if !strings.Contains(string(b), "name: cuda13-torch29") {
		t.Errorf("init wrote %s", b)
	}
	if code, out, _ := run(t, "resolve", dst); code != 0 || !strings.Contains(out, "13.0.3") { // the newest published 13.0 patch
		t.Errorf("resolve init'ed recipe: %d %s", code, out)
	}
	if code, _, _ := run(t, "recipes"); code != 2 {
		t.Errorf("bare recipes: exit %d", code)
	}
}

// recipes list fits 80 columns on a pipe (it was 154); --json keeps the
// whole description.
func TestRecipesListFitsEightyColumns(t *testing.T) {
	code, out, errOut := run(t, "recipes", "list")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		if n := termtable.Len(l); n > 80 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "(default)") {
		t.Errorf("list:\n%s", out)
	}
}
