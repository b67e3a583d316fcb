package compatcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln compat driver, gpu and refresh: flags reach their options.
func TestNewCmdCompatOptions(t *testing.T) {
	d, err := cmdtest.Options(t, NewCmdCompatDriver, "--cuda", "12.8", "--driver", "550.54", "--gpu", "h100", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if d.CUDA != "12.8" || d.Driver != "550.54" || d.GPU != "h100" || !d.JSON {
		t.Fatalf("driver options %+v", d)
	}
	g, err := cmdtest.Options(t, NewCmdCompatGPU, "l4", "--cuda", "12.4", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if g.CUDA != "12.4" || !g.JSON {
		t.Fatalf("gpu options %+v", g)
	}
	r, err := cmdtest.Options(t, NewCmdCompatRefresh, "-o", "c.json", "--check", "--variant", "cu124", "--variant", "cu128", "--index", "http://i/whl")
	if err != nil {
		t.Fatal(err)
	}
	if r.Output != "c.json" || !r.Check || !reflect.DeepEqual(r.Variants, []string{"cu124", "cu128"}) || r.IndexURL != "http://i/whl" {
		t.Fatalf("refresh options %+v", r)
	}
}
