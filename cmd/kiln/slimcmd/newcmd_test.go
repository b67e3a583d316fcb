package slimcmd

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/moby/buildkit/client"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
)

// kiln slim's flags reach its options (runF stops before the image is
// opened), and --probe's builder connection is the Factory's.
func TestNewCmdSlimOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdSlim, "reg/acme/serve:1", "--to", "oci:out:slim", "--policy", "runtime-strict", "--compression", "zstd", "--probe", "true", "--gpus", "h100,l4", "--keep-ptx=false", "--weights-to", "oci:w:1", "--sbom", "--sign-key", "k.pem", "-j", "2")
	if err != nil {
		t.Fatal(err)
	}
	if o.Image != "reg/acme/serve:1" || o.To != "oci:out:slim" || o.Policy != "runtime-strict" || o.Compression != "zstd" || o.Probe != "true" || !reflect.DeepEqual(o.GPUs, []string{"h100", "l4"}) || o.KeepPTX || o.WeightsTo != "oci:w:1" || !o.SBOM || o.SignKey != "k.pem" || o.Jobs != 2 {
		t.Fatalf("options %+v", o)
	}
	if o.BuildKit == nil || o.Registry == nil || o.Version != "dev" {
		t.Fatalf("options %+v: want the Factory's BuildKit, registry options and version", o)
	}
}

// --probe dials the builder through the Factory (Factory.BuildKit): a
// test's builder is used, with --builder's address, and its refusal is
// reported before the rewrite.
func TestSlimProbeConnectsThroughTheFactory(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("etc/a", []byte("a"))}, "gzip"))
	testimage.WriteLayout(t, dir, "app", img)
	var out, errOut bytes.Buffer
	f := cmdtest.Factory(&out, &errOut, cmdutil.Leaf(NewCmdSlim))
	var dialled []string
	f.BuildKit = func(_ context.Context, addr string, _ builder.TLS) (*client.Client, string, error) {
		dialled = append(dialled, addr)
		return nil, "", errors.New("the test's builder is away")
	}
	code := f.Exec(context.Background(), []string{"slim", "oci:" + dir + ":app", "--to", "oci:" + filepath.Join(dir, "out"), "--probe", "true", "--builder", "tcp://b:1234", "--progress", "none"}, f.IO)
	if code != cmdutil.ExitFailure || !strings.Contains(errOut.String(), "--probe needs BuildKit: the test's builder is away") {
		t.Fatalf("code %d, %s", code, errOut.String())
	}
	if !reflect.DeepEqual(dialled, []string{"tcp://b:1234"}) {
		t.Fatalf("dialled %v, want the Factory's BuildKit once with --builder's address", dialled)
	}
}
