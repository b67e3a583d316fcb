package weights

import (
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"
)

// TestConsumerPublishesNothing: the consumer side of weights volumes (this
// package), and kiln warm above it, compile none of the producer's
// packages (weights/strip, layers/publish, sbom): warm reads volumes, it
// never writes images or SBOMs.
func TestConsumerPublishesNothing(t *testing.T) {
	const kiln = "github.com/kiln-build/kiln/"
	for _, pkg := range []string{".", "../warm"} {
		for _, d := range testkit.Deps(t, pkg) {
			switch {
			case d == kiln+"weights/strip", d == kiln+"layers/publish", d == kiln+"sbom":
				t.Errorf("%s compiles %s, the producer's", pkg, d)
			case pkg == "." && d == kiln+"sign":
				t.Errorf("weights compiles sign: verifying a volume needs no signatures")
			}
		}
	}
}
