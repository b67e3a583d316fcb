package proberecordcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln probe-record's flags and CMD reach its options; --out is required
// before it runs.
func TestNewCmdProbeRecordOptions(t *testing.T) {
	o, err := cmdtest.Options(t, NewCmdProbeRecord, "--out", "/tmp/opened", "--user", "1000:1000", "--", "python3", "-c", "import torch")
	if err != nil {
		t.Fatal(err)
	}
	if o.Out != "/tmp/opened" || o.User != "1000:1000" || !reflect.DeepEqual(o.Cmd, []string{"python3", "-c", "import torch"}) {
		t.Fatalf("options %+v", o)
	}
	if o, err := cmdtest.Options(t, NewCmdProbeRecord, "true"); err == nil || o != nil {
		t.Fatalf("no --out: options %v, error %v; want a usage error before runF", o, err)
	}
}
