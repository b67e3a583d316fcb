package lockcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln lock's flags and recipe overrides reach its options.
func TestNewCmdLockOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdLock, "r.yaml", "--check", "-o", "out.lock", "--mirror", "m:5000", "--wheel-index", "http://i/simple", "--insecure-registry", "m:5000")
	if err != nil {
		t.Fatal(err)
	}
	if o.File != "r.yaml" || !o.Check || o.Output != "out.lock" || !reflect.DeepEqual(o.Mirror, []string{"m:5000"}) || !reflect.DeepEqual(o.WheelIndexes, []string{"http://i/simple"}) || !reflect.DeepEqual(o.InsecureRegistry, []string{"m:5000"}) {
		t.Fatalf("options %+v", o)
	}
}
