package weightscmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln weights strip, pull, verify and run-args: flags reach their
// options (runF stops before anything is read).
func TestNewCmdWeightsOptions(t *testing.T) {
	s, err := cmdtest.Options(t, NewCmdWeightsStrip, "reg/a:1", "--to", "reg/a:slim", "--weights-to", "oci:w:1", "--image-twin", "reg/a-twin:1", "--mount", "/models", "--sbom", "--level", "5")
	if err != nil {
		t.Fatal(err)
	}
	if s.Image != "reg/a:1" || s.To != "reg/a:slim" || s.WeightsTo != "oci:w:1" || s.ImageTwin != "reg/a-twin:1" || s.Mount != "/models" || !s.SBOM || s.Level != 5 || s.Registry == nil || s.Version != "dev" {
		t.Fatalf("strip options %+v", s)
	}
	p, err := cmdtest.Options(t, NewCmdWeightsPull, "reg/w:1", "--into", "/var/lib/w", "--chunk-size", "8MiB", "--limit-rate", "1GiB", "--quick")
	if err != nil {
		t.Fatal(err)
	}
	if p.Ref != "reg/w:1" || p.Into != "/var/lib/w" || p.ChunkSize != "8MiB" || p.LimitRate != "1GiB" || !p.Quick {
		t.Fatalf("pull options %+v", p)
	}
	v, err := cmdtest.Options(t, NewCmdWeightsVerify, "/var/lib/w", "--manifest", "m.json", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if v.Dir != "/var/lib/w" || v.Manifest != "m.json" || !v.JSON {
		t.Fatalf("verify options %+v", v)
	}
	r, err := cmdtest.Options(t, NewCmdWeightsRunArgs, "reg/a:slim", "--volume", "/v", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	if r.Ref != "reg/a:slim" || r.Volume != "/v" || r.Format != "json" {
		t.Fatalf("run-args options %+v", r)
	}
	_ = reflect.DeepEqual
}
