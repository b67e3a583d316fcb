package fatbincmd

import (
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
)

// run runs kiln ARGS... with this package's verbs wired, as cmd/kiln runs them.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return cmdtest.Run(t, []cmdtest.Verb{verbkit.Light(NewCmdFatbin)}, args...)
}
