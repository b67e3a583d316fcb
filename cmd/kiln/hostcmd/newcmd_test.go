package hostcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln host check's flags reach its options.
func TestNewCmdHostCheckOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdHostCheck, "--image", "reg/a:1", "--verify-key", "k.pub", "--root", "/host", "--volume", "/a", "--volume", "/b", "--json", "--no-kernels")
	if err != nil {
		t.Fatal(err)
	}
	if o.Image != "reg/a:1" || o.VerifyKey != "k.pub" || o.Root != "/host" || !reflect.DeepEqual(o.Volumes, []string{"/a", "/b"}) || !o.JSON || !o.NoKernels || o.Registry == nil {
		t.Fatalf("options %+v", o)
	}
}
