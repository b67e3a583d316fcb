package convertcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln convert's flags reach its options; the old --tmp spelling is
// --work-dir.
func TestNewCmdConvertOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdConvert, "reg/acme/serve:1", "--to", "oci:out:z", "--level", "9", "--format", "estargz", "--startup-list", "s.txt", "--tmp", "/scratch", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if o.Image != "reg/acme/serve:1" || o.To != "oci:out:z" || o.Level != 9 || o.Format != "estargz" || o.StartupList != "s.txt" || o.TempDir != "/scratch" || !o.JSON || o.Compression != "zstd" {
		t.Fatalf("options %+v", o)
	}
	if o.Registry == nil {
		t.Fatal("the image flags do not start from the Factory's registry options")
	}
	_ = reflect.DeepEqual
}
