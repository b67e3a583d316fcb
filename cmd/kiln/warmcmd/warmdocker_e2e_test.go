package warmcmd

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
)

// kiln warm --target docker:SOCK against a real dockerd 20.10: a gzip image
// is loaded (exit 0, the engine has it), a rerun fetches nothing, and a
// zstd-only image is refused with exit 1 and a message naming Docker 23.0.
func TestWarmDockerCLI(t *testing.T) {
	dk := testdaemon.StartDockerd(t)
	reg := testimage.Registry(t)
	ref := reg + "/kiln-warm/docker:v1"
	testimage.Push(t, ref, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("a.bin", 300<<10)}, "gzip")))
	target := "docker:" + dk.Socket
	stage := filepath.Join(t.TempDir(), "stage")
	for i, wantFetched := range []bool{true, false} {
		code, out, errOut := run(t, "warm", ref, "--target", target, "--docker-stage", stage, "--keep-stage", "--json", "--progress", "none", "--platform", "linux/amd64")
		if code != cmdutil.ExitOK {
			t.Fatalf("warm %d: exit %d\n%s\n%s", i, code, out, errOut)
		}
		var r warm.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil || !r.Ready || r.Target != target {
			t.Fatalf("warm %d: %v %s", i, err, out)
		}
		if (r.FetchedBytes > 0) != wantFetched {
			t.Errorf("warm %d: fetched %d bytes", i, r.FetchedBytes)
		}
		if im, ok := dk.Inspect(t, ref); !ok || len(im.RepoTags) != 1 || im.RepoTags[0] != ref {
			t.Fatalf("warm %d: engine has %+v (%v)", i, im, ok)
		}
	}
	// --keep-stage: the layer stays staged, verified, in an OCI layout.
	staged, _ := filepath.Glob(filepath.Join(stage, "blobs", "sha256", "*"))
	if len(staged) != 1 {
		t.Errorf("--keep-stage: staged blobs %v, want the one layer", staged)
	}
	// The stage flags belong to the docker target.
	if code, _, errOut := run(t, "warm", ref, "--target", "oci:"+t.TempDir(), "--keep-stage"); code != cmdutil.ExitUsage || !strings.Contains(errOut, "--target docker") {
		t.Errorf("--keep-stage with oci: exit %d, want 2\n%s", code, errOut)
	}
	zref := reg + "/kiln-warm/docker:zstd"
	testimage.Push(t, zref, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("z", []byte("z"))}, "zstd")))
	code, out, errOut := run(t, "warm", zref, "--target", target, "--progress", "none", "--platform", "linux/amd64")
	if code != cmdutil.ExitFailure || !strings.Contains(errOut, "Docker 23.0") {
		t.Fatalf("zstd-only image: exit %d, want 1 naming Docker 23.0\n%s\n%s", code, out, errOut)
	}
	if _, ok := dk.Inspect(t, zref); ok {
		t.Error("the zstd image reached the engine")
	}
}
