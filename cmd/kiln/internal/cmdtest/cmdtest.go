// Package cmdtest runs kiln verbs from tests the way cmd/kiln runs them:
// the same root command (cmdutil.NewRoot), the same exit-code mapping and
// redaction (cmdutil.Execute), with buffers for the streams.
package cmdtest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
)

// Verb builds a verb's command from a Factory (a verb package's NewCmd).
type Verb = func(*cmdutil.Factory) *cobra.Command

// Factory is a Factory of buffers for tests, version "dev". Its Exec
// runs args through a root of verbs.
func Factory(out, errOut *bytes.Buffer, verbs ...Verb) *cmdutil.Factory {
	f := &cmdutil.Factory{IO: &cmdutil.IO{In: strings.NewReader(""), Out: out, ErrOut: errOut}, Version: "dev"}
	f.Exec = func(ctx context.Context, args []string, ios *cmdutil.IO) int {
		g := *f
		g.IO = ios
		return cmdutil.Execute(ctx, cmdutil.NewRoot(&g, verbs...), args, ios)
	}
	return f
}

// Run runs kiln ARGS... with only verbs wired and returns the exit code,
// stdout and stderr.
func Run(t testing.TB, verbs []Verb, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := Factory(&out, &errOut, verbs...)
	code := f.Exec(context.Background(), args, f.IO)
	return code, out.String(), errOut.String()
}
