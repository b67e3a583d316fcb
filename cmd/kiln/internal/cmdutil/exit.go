package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/internal/termtext"
	"github.com/kiln-build/kiln/layers"
)

// Exit codes are part of kiln's stable interface: scripts and CI branch on them.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed (bad image, unreachable registry, incompatible stack)
	ExitUsage   = 2 // the command line itself is wrong
	ExitRule    = 3 // a --ci rule was broken
	// ExitUnverified: a signature gate refused (kiln verify, kiln warm
	// --verify-key): missing, wrong key, tampered.
	ExitUnverified = 4
)

// ExitError carries an exit code through cobra's error return.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Exit wraps err so that the command exits with code.
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// UsageErr marks a command-line mistake (exit 2).
func UsageErr(format string, a ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, a...)}
}

// SilentExit exits with its code without printing anything more (the
// command already reported, e.g. a failed --ci gate or an incompatible
// verdict).
type SilentExit int

func (s SilentExit) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// Execute runs root with args and returns the process exit code, printing
// the error (redacted) to errOut.
func Execute(ctx context.Context, root *cobra.Command, args []string, ios *IO) int {
	root.SetArgs(args)
	root.SetIn(ios.In)
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var s SilentExit
	if errors.As(err, &s) {
		return int(s)
	}
	code := ExitFailure
	var ee *ExitError
	if errors.As(err, &ee) {
		code = ee.Code
	} else if isCobraUsage(err) {
		code = ExitUsage
	}
	// The last line of defence: no credential in what kiln prints, whichever
	// package formed the error (layers redacts where registry errors form),
	// and no terminal escape from the error bodies and artifact text it
	// may quote.
	fmt.Fprintf(ios.ErrOut, "kiln: %s\n", termtext.Clean(layers.Redact(err.Error())))
	return code
}

// isCobraUsage recognises cobra's own argument and flag errors, which it
// returns as plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "requires at most", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// IO bundles the streams a command writes to; tests hand in buffers.
type IO struct {
	In     io.Reader
	Out    io.Writer // data: tables, JSON
	ErrOut io.Writer // progress, warnings, errors
}
