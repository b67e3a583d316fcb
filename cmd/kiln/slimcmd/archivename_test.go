package slimcmd

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
)

// slim --to docker-archive:FILE tagged every image kiln/image:latest; the
// archive records the source's name as docker save would (FILE.tar:TAG
// keeps the source's repository and takes TAG; a full name is kept).
func TestSlimArchiveTakesSourceName(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))}, "gzip"))
	reg := testimage.Registry(t)
	testimage.Push(t, reg+"/team/app:v1", img)
	testimage.WriteLayout(t, filepath.Join(dir, "lay"), "v3", img)
	for i, tc := range []struct{ src, to, want string }{
		{reg + "/team/app:v1", "", reg + "/team/app:v1"},
		{reg + "/team/app:v1", ":v2", reg + "/team/app:v2"},
		{reg + "/team/app:v1", ":other/name:x", "other/name:x"},
		{"oci:" + filepath.Join(dir, "lay") + ":v3", "", "lay:v3"},
	} {
		arch := filepath.Join(dir, "out", string(rune('a'+i))+".tar")
		code, out, errOut := run(t, "slim", tc.src, "--to", "docker-archive:"+arch+tc.to, "--progress", "none")
		if code != cmdutil.ExitOK {
			t.Fatalf("%s → %s: exit %d\n%s\n%s", tc.src, tc.to, code, out, errOut)
		}
		back, err := testkit.OpenImage(context.Background(), "docker-archive:"+arch)
		if err != nil {
			t.Fatal(err)
		}
		if len(back.Names) != 1 || back.Names[0] != tc.want {
			t.Errorf("%s --to docker-archive:FILE%s: the archive names %q, want %s", tc.src, tc.to, back.Names, tc.want)
		}
		back.Close()
	}
}
