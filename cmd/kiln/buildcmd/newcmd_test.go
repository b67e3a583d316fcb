package buildcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln build's flags reach its options (runF stops before the recipe is
// read or BuildKit dialled), and the builder connection is the Factory's.
func TestNewCmdBuildOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdBuild, "serve.yaml", "--locked", "--push", "reg/acme/serve:1", "--to", "oci:out", "--compression", "gzip", "--builder", "tcp://b:1234", "--sign-key", "k.pem", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if o.File != "serve.yaml" || !o.Locked || o.Push != "reg/acme/serve:1" || !reflect.DeepEqual(o.Outputs, []string{"oci:out"}) || o.Compression != "gzip" || o.Builder != "tcp://b:1234" || o.SignKey != "k.pem" || !o.DryRun {
		t.Fatalf("options %+v", o)
	}
	if o.BuildKit == nil || o.Version != "dev" {
		t.Fatalf("BuildKit %v, version %q: want the Factory's", o.BuildKit != nil, o.Version)
	}
}
