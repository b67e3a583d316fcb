package compatcmd

import (
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/resolvecmd"
)

// run runs kiln ARGS... with this package's verbs wired, as cmd/kiln runs them
// (and resolve, which reads the data compat refresh writes).
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return cmdtest.Run(t, []cmdtest.Verb{NewCmdCompat, cmdutil.Leaf(resolvecmd.NewCmdResolve)}, args...)
}
