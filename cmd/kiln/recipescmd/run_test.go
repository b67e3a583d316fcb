package recipescmd

import (
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/cmd/kiln/resolvecmd"
)

// run runs kiln ARGS... with this package's verbs wired, as cmd/kiln runs them
// (and resolve, which reads what this verb writes).
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return cmdtest.Run(t, []cmdtest.Verb{verbkit.Light(NewCmdRecipes), cmdutil.Leaf(resolvecmd.NewCmdResolve)}, args...)
}
