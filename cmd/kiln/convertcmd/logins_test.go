package convertcmd

import (
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
)

// One kiln convert --sign-key logs in once per repository: the source is
// read through one client; the converted image's write, its read-back by
// digest and the signature (blobs, manifest, referrers) go through one
// client of the destination (the command's registry pool). Before, the
// write, the read-back and the signature each logged in: three for the
// destination.
func TestConvertSignOneTokenExchangePerRepository(t *testing.T) {
	ta := testimage.TokenRegistry(t, true)
	src, dst := ta.Host()+"/acme/src:v1", ta.Host()+"/acme/dst:v1"
	testimage.Push(t, src, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("app/bin", 4096)}, "gzip")))
	keys := cmdtest.NewKeys(t)
	ta.Reset()
	if code, out, errOut := run(t, "convert", src, "--to", dst, "--sign-key", keys.Key, "--json", "--progress", "none"); code != cmdutil.ExitOK {
		t.Fatalf("convert: exit %d\n%s\n%s", code, out, errOut)
	}
	ex := ta.Exchanges()
	t.Logf("token exchanges per repository: %v", ex)
	if len(ex) != 2 || ex["acme/src"] != 1 || ex["acme/dst"] != 1 {
		t.Errorf("token exchanges: %v, want one for acme/src and one for acme/dst", ex)
	}
}
