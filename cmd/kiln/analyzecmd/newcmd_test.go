package analyzecmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln analyze's flags reach its options (runF stops before the image is
// read), and its image options start from the Factory's registry options.
func TestNewCmdAnalyzeOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdAnalyze, "oci:dir:app", "--json", "--ci", "rules.yaml", "-j", "3", "--gpu", "h100", "--gpu", "l4", "--platform", "linux/arm64", "--html", "r.html", "--against", "oci:dir:old")
	if err != nil {
		t.Fatal(err)
	}
	if o.Image != "oci:dir:app" || !o.JSON || o.CIRules != "rules.yaml" || o.Jobs != 3 || !reflect.DeepEqual(o.GPUs, []string{"h100", "l4"}) || o.Platform != "linux/arm64" || o.HTML != "r.html" || o.Against != "oci:dir:old" {
		t.Fatalf("options %+v", o)
	}
	if o.Registry == nil {
		t.Fatal("the image flags do not start from the Factory's registry options")
	}
	if _, err := o.LayersOptions(); err != nil {
		t.Fatal(err)
	}
	if o, err := cmdtest.Options(t, NewCmdAnalyze); err == nil || o != nil {
		t.Fatalf("no IMAGE: options %v, error %v; want refused before runF", o, err)
	}
}
