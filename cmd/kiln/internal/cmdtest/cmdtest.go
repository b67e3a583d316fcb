// Package cmdtest runs kiln verbs from tests the way cmd/kiln runs them:
// the same root command (verbkit.NewRoot), the same exit-code mapping and
// redaction (cmdutil.Execute), with buffers for the streams.
package cmdtest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
)

// Verb builds a verb's command from a Factory (a verb package's NewCmd;
// verbkit.Light(NewCmd) for a verb of cmdutil's Factory alone).
type Verb = verbkit.Verb

// Factory is a Factory of buffers for tests, version "dev". Its Exec
// runs args through a root of verbs.
func Factory(out, errOut *bytes.Buffer, verbs ...Verb) *verbkit.Factory {
	f := verbkit.New(&cmdutil.IO{In: strings.NewReader(""), Out: out, ErrOut: errOut}, cmdutil.BuildInfo{}, nil)
	f.Version = "dev"
	f.Exec = func(ctx context.Context, args []string, ios *cmdutil.IO) int {
		return cmdutil.Execute(ctx, verbkit.NewRoot(f.WithIO(ios), verbs...), args, ios)
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

// Options builds a verb with newCmd (its NewCmdX) and a runF that
// captures its options, runs it with args (flag parsing and the checks
// the verb makes before its workflow, which does not run) and returns
// the options runF got (nil when the verb refused args first) and the
// error. F is either Factory a verb takes: verbkit's, or cmdutil's alone.
func Options[F *verbkit.Factory | *cmdutil.Factory, O any](t testing.TB, newCmd func(F, func(*O) error) *cobra.Command, args ...string) (*O, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	var got *O
	vf := Factory(&out, &errOut)
	var f F
	switch any(f).(type) {
	case *verbkit.Factory:
		f = any(vf).(F)
	case *cmdutil.Factory:
		f = any(vf.Factory).(F)
	}
	cmd := newCmd(f, func(o *O) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	_, err := cmd.ExecuteContextC(context.Background())
	return got, err
}
