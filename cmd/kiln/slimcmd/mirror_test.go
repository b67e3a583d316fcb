package slimcmd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/registry"
)

// kiln slim reads a Docker Hub short name through $KILN_MIRROR and names
// the result by the real reference, not the mirror's.
func TestSlimShortNameThroughKilnMirror(t *testing.T) {
	old := verbkit.MirrorFiles
	verbkit.MirrorFiles = registry.MirrorFiles{}
	t.Cleanup(func() { verbkit.MirrorFiles = old })
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))}, "gzip"))
	mirror := testimage.Registry(t)
	testimage.Push(t, mirror+"/hub-proxy/acme/app:v1", img)
	t.Setenv(registry.MirrorEnv, mirror+"/hub-proxy")

	arch := filepath.Join(t.TempDir(), "out.tar")
	code, out, errOut := run(t, "slim", "acme/app:v1", "--to", "docker-archive:"+arch, "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("slim acme/app:v1: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(testkit.Flat(errOut), "read through mirror "+mirror+"/hub-proxy ($KILN_MIRROR)") {
		t.Errorf("stderr does not name the mirror:\n%s", errOut)
	}
	back, err := testkit.OpenImage(context.Background(), "docker-archive:"+arch)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if len(back.Names) != 1 || strings.Contains(back.Names[0], mirror) {
		t.Errorf("the archive names %q, want the real reference", back.Names)
	}
}
