package fatbincmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testimage"
)

// D9: a kill -9 during a prune leaves its temporary file beside the
// library (a full ELF copy). The next prune does not count it as a
// library: it removes it when it is stale, and passes over a fresh one
// (a prune running now).
func TestFatbinPruneRemovesAKilledPrunesTemp(t *testing.T) {
	c, p := testimage.Cubin, testimage.PTX
	lib := testimage.FatbinELF(testimage.FatbinContainer(1, c(50, 100), c(80, 100), p(90, 50), c(90, 100)))
	root := t.TempDir()
	torch := filepath.Join(root, "libtorch_cuda.so")
	stale := filepath.Join(root, ".kiln-prune.libtorch_cuda.so.1234.tmp")
	fresh := filepath.Join(root, ".kiln-prune.libc10_cuda.so.5678.tmp")
	scratch := filepath.Join(root, ".libtorch_cuda.so.99.tmp")
	for _, f := range []string{torch, stale, fresh, scratch} {
		if err := os.WriteFile(f, lib, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)

	code, out, errOut := run(t, "fatbin", "prune", root, "--gpus", "h100", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	var rep struct {
		Libraries []struct{ Path string } `json:"libraries"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Libraries) != 1 || rep.Libraries[0].Path != torch {
		t.Errorf("libraries %+v, want only %s", rep.Libraries, torch)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) || !strings.Contains(errOut, "removed "+stale) {
		t.Errorf("stale temporary file not removed (%v): %s", err, errOut)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh one (a prune running now) was removed: %v", err)
	}
}
