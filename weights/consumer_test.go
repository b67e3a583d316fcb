package weights

import (
	"os/exec"
	"strings"
	"testing"
)

// TestConsumerPublishesNothing: the consumer side of weights volumes (this
// package), and kiln warm above it, compile none of the producer's
// packages (weights/strip, layers/publish, sbom): warm reads volumes, it
// never writes images or SBOMs.
func TestConsumerPublishesNothing(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	const kiln = "github.com/kiln-build/kiln/"
	for _, pkg := range []string{".", "../warm"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, d := range strings.Fields(string(out)) {
			switch d {
			case kiln + "weights/strip", kiln + "layers/publish", kiln + "sbom":
				t.Errorf("%s compiles %s, the producer's", pkg, d)
			}
		}
		if pkg == "." && strings.Contains(string(out), kiln+"sign\n") {
			t.Errorf("weights compiles sign: verifying a volume needs no signatures")
		}
	}
}
