package resolvecmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln resolve's flags reach its options.
func TestNewCmdResolveOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdResolve, "r.yaml", "--json", "--locked", "--max-data-age", "7", "--compat-data", "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if o.File != "r.yaml" || !o.JSON || !o.Locked || o.MaxDataAge != 7 || o.CompatData != "c.json" {
		t.Fatalf("options %+v", o)
	}
	_ = reflect.DeepEqual
}
