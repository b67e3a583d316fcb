package recipescmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln recipes list, show and init: arguments and flags reach their
// options.
func TestNewCmdRecipesOptions(t *testing.T) {
	l, err := cmdtest.Options(t, NewCmdRecipesList, "--json")
	if err != nil || !l.JSON {
		t.Fatalf("list: %+v, %v", l, err)
	}
	s, err := cmdtest.Options(t, NewCmdRecipesShow, "torch25-cu124")
	if err != nil || s.Name != "torch25-cu124" {
		t.Fatalf("show: %+v, %v", s, err)
	}
	i, err := cmdtest.Options(t, NewCmdRecipesInit, "-o", "serve/kiln.yaml", "--force")
	if err != nil {
		t.Fatal(err)
	}
	if i.Name == "" || i.Output != "serve/kiln.yaml" || !i.Force {
		t.Fatalf("init options %+v: want the default recipe, -o and --force", i)
	}
	_ = reflect.DeepEqual
}
