package warmcmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
)

// warm --dry-run reports what is missing and writes nothing: it created
// the oci: layout (blobs/, index.json, oci-layout) it was asked about.
func TestWarmDryRunWritesNothing(t *testing.T) {
	host := testimage.Registry(t)
	ref := host + "/kiln-warm/dry:v1"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a.bin", 1000)}, "gzip")))
	dir := filepath.Join(t.TempDir(), "oci")
	code, out, errOut := run(t, "warm", ref, "--target", "oci:"+dir, "--dry-run", "--json", "--progress", "none")
	if code != cmdutil.ExitNotReady {
		t.Fatalf("exit %d, want %d (missing)\n%s\n%s", code, cmdutil.ExitNotReady, out, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(dir)
		t.Errorf("--dry-run wrote %s: %v %v", dir, err, entries)
	}
}
