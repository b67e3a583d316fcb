package weightscmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
)

// weights strip checks its destinations before the rewrite (issue 25 item
// 8): the image's layer lies about its digest, which only the rewrite
// finds; an unwritable destination must be reported first.
func TestWeightsStripPreflights(t *testing.T) {
	dir := t.TempDir()
	good := testimage.Tar(t, []testimage.Entry{testimage.File("models/a.safetensors", []byte("a"))})
	bad := bytes.Clone(good)
	bad[600] ^= 1
	h, _, _ := v1.SHA256(bytes.NewReader(good))
	testimage.WriteLayout(t, dir, "bad", testimage.Image(t, testimage.Config{}, testimage.Lying(bad, h, h, "application/vnd.oci.image.layer.v1.tar")))
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "127.0.0.1:1/kiln/app:slim", "--weights-to", "oci:" + filepath.Join(dir, "w")}, "--to 127.0.0.1:1/kiln/app:slim: cannot reach"},
		{[]string{"--to", "oci:" + filepath.Join(dir, "out"), "--weights-to", "oci:" + filepath.Join(file, "w")}, "is a file, not a directory"},
	} {
		code, _, errOut := cmdtest.Run(t, []cmdtest.Verb{NewCmdWeights}, append([]string{"weights", "strip", "oci:" + dir + ":bad", "--progress", "none"}, tc.args...)...)
		if code != cmdutil.ExitFailure || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "digest") {
			t.Errorf("%v: exit %d: %s; want %q before the rewrite", tc.args, code, errOut, tc.want)
		}
	}
}
