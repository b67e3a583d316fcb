package fatbincmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/internal/testimage"
)

func TestFatbinPrune(t *testing.T) {
	c, p := testimage.Cubin, testimage.PTX
	lib := testimage.FatbinELF(testimage.FatbinContainer(1, c(50, 100), c(80, 100), p(90, 50), c(90, 100)))
	root := t.TempDir()
	torch := filepath.Join(root, "site-packages/torch/lib/libtorch_cuda.so")
	cublas := filepath.Join(root, "site-packages/nvidia/cublas/lib/libcublasLt.so.12")
	for _, f := range []string{torch, cublas} {
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, lib, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "notes.so.txt"), []byte("not an ELF"), 0o644)
	os.Symlink("libtorch_cuda.so", filepath.Join(root, "site-packages/torch/lib/libtorch_cuda.so.2"))

	code, out, errOut := run(t, "fatbin", "prune", root, "--gpus", "h100", "--keep-ptx=false", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	var rep struct {
		Fleet     []string `json:"fleet"`
		Libraries []struct {
			Path    string   `json:"path"`
			Kept    []string `json:"kept"`
			Dropped []string `json:"dropped"`
		} `json:"libraries"`
		NotPruned []struct {
			Path        string `json:"path"`
			ZeroedBytes int64  `json:"zeroed_bytes"`
		} `json:"not_pruned"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Libraries) != 1 || rep.Libraries[0].Path != torch || !reflect.DeepEqual(rep.Libraries[0].Kept, []string{"sm_90"}) {
		t.Errorf("libraries %+v", rep.Libraries)
	}
	if len(rep.NotPruned) != 1 || rep.NotPruned[0].Path != cublas || rep.NotPruned[0].ZeroedBytes == 0 {
		t.Errorf("not pruned %+v", rep.NotPruned)
	}
	got, _ := os.ReadFile(torch)
	f, _ := fatbin.Scan(bytes.NewReader(got))
	if len(got) != len(lib) || !reflect.DeepEqual(f.Archs(), []string{"sm_90"}) {
		t.Errorf("torch after: %d bytes, %v", len(got), f.Archs())
	}
	if b, _ := os.ReadFile(cublas); !bytes.Equal(b, lib) {
		t.Error("cuBLAS rewritten without --prune-nvidia-libs")
	}

	// Failures are one JSON object too, with the usage exit code.
	code, out, _ = run(t, "fatbin", "prune", root, "--json")
	if code != cmdutil.ExitUsage || !strings.Contains(out, `"error": "--gpus is required`) {
		t.Errorf("exit %d: %s", code, out)
	}
	code, out, _ = run(t, "fatbin", "prune", root, "--gpus", "h100", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || !strings.Contains(out, "not pruned: 1 NVIDIA libraries") {
		t.Errorf("exit %d: %s", code, out)
	}
}

// A library that changed while it was pruned (a pip install beside the
// prune) is left as it is, named, and the command fails: its job is not
// done (it exited 0).
func TestFatbinPruneFailsWhenALibraryChanged(t *testing.T) {
	c := testimage.Cubin
	lib := testimage.FatbinELF(testimage.FatbinContainer(1, c(50, 100), c(90, 100)))
	root := t.TempDir()
	torch := filepath.Join(root, "libtorch_cuda.so")
	os.WriteFile(torch, lib, 0o644)
	pruneFile = func(p string, fleet []fatbin.GPU, keepPTX, dryRun bool) (*fatbin.Plan, error) {
		return nil, fmt.Errorf("%s: %w: left as it is (prune it again)", p, fatbin.ErrChanged)
	}
	t.Cleanup(func() { pruneFile = fatbin.PruneFile })
	code, out, errOut := run(t, "fatbin", "prune", root, "--gpus", "h100", "--json")
	if code != cmdutil.ExitFailure || !strings.Contains(out, "changed while being pruned") || !strings.Contains(errOut, torch) {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, out, errOut)
	}
}
