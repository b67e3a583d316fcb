package fatbincmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln fatbin prune's flags reach its options.
func TestNewCmdFatbinPruneOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdFatbinPrune, "/a", "/b", "--gpus", "h100,l4", "--keep-ptx=false", "--dry-run", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Paths, []string{"/a", "/b"}) || !reflect.DeepEqual(o.GPUs, []string{"h100", "l4"}) || o.KeepPTX || !o.DryRun || !o.JSON {
		t.Fatalf("options %+v", o)
	}
}
