package warmcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln warm's flags reach its options (runF stops before a target is
// opened or a fleet asked), and its target opener is the Factory's.
func TestNewCmdWarmOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdWarm, "reg/a:1", "reg/b:2", "--target", "containerd", "-n", "k8s.io", "--unpack", "--dry-run", "-j", "8", "--limit-rate", "100MiB", "--ready-file", "/run/r", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Args, []string{"reg/a:1", "reg/b:2"}) || o.Target != "containerd" || o.Namespace != "k8s.io" || !o.Unpack || !o.DryRun || o.Concurrency != 8 || o.LimitRate != "100MiB" || o.ReadyFile != "/run/r" || !o.JSON {
		t.Fatalf("options %+v", o)
	}
	if o.OpenTarget == nil || o.Registry == nil {
		t.Fatalf("options %+v: want the Factory's target opener and registry options", o)
	}
}
