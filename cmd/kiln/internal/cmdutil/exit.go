package cmdutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/internal/redact"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/termtext"
)

// Exit codes are part of kiln's stable interface: scripts and CI branch on
// them. One meaning each, the same mistake giving the same code from every
// verb; ExitCodesHelp is the table (kiln --help, docs/exit-codes.md).
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed (bad image, unreachable registry, incompatible stack, files that do not verify)
	ExitUsage   = 2 // the command line itself is wrong (an unknown flag, a malformed reference, a missing argument)
	ExitRule    = 3 // a --ci / --check rule was broken (analyze --ci, build --check)
	// ExitUnverified: a signature gate refused (kiln verify, kiln warm
	// --verify-key): missing, wrong key, tampered.
	ExitUnverified = 4
	// ExitNotReady: a dry run or status found work left to do (warm
	// --dry-run, warm status: layers missing on a host).
	ExitNotReady = 5
	// ExitInterrupted: SIGINT or SIGTERM stopped the command (128+2, as a
	// shell reports Ctrl-C).
	ExitInterrupted = 130
)

// ExitCodesHelp is the exit-code table as kiln --help prints it.
const ExitCodesHelp = `Exit codes (the same from every command):
  0    ok
  1    the command failed (unreachable registry, bad image, files that do
       not verify, incompatible stack)
  2    usage: the command line is wrong (unknown flag, malformed reference,
       missing argument)
  3    a --ci / --check rule was broken (analyze --ci, build --check)
  4    a signature did not verify (verify, warm --verify-key)
  5    not ready: a dry run or status found work left (warm --dry-run,
       warm status)
  130  interrupted (Ctrl-C, SIGTERM)`

// codeWords says what a code means, for --json's "error" when a verb
// already reported in its own words (SilentExit).
func codeWords(code int) string {
	switch code {
	case ExitUsage:
		return "usage error"
	case ExitRule:
		return "a --ci rule was broken"
	case ExitUnverified:
		return "not verified"
	case ExitNotReady:
		return "not ready: work left to do"
	case ExitInterrupted:
		return "interrupted"
	}
	return "failed"
}

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

// Reported is SilentExit with the one line --json's "error" says (the
// verb printed its report; "failed" alone told a script nothing).
type Reported struct {
	Code    int
	Summary string
}

func (r *Reported) Error() string { return r.Summary }

// ReportedExit exits with code after the verb's own report, summary the
// JSON error.
func ReportedExit(code int, format string, a ...any) error {
	return &Reported{Code: code, Summary: fmt.Sprintf(format, a...)}
}

// resumesAnnotation marks a command that picks up where it stopped when
// run again (Resumes).
const resumesAnnotation = "kiln.resumes"

// Resumes marks cmd as resuming when run again after an interruption (its
// transfers are staged and verified): Ctrl-C then says so. It returns cmd.
func Resumes(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[resumesAnnotation] = "true"
	return cmd
}

// Execute runs root with args and returns the process exit code. It is
// the one place an error is printed (once, redacted, to errOut) and the
// one place --json's contract is kept (output.go): with --json, stdout is
// held while the verb runs and exactly one object is written after it.
// A cancelled ctx (SIGINT, SIGTERM) exits 130 whatever error the verb
// returned, saying whether running the command again resumes.
func Execute(ctx context.Context, root *cobra.Command, args []string, ios *IO) int {
	var held bytes.Buffer
	out := ios.Out
	jsonMode := wantsJSON(args)
	if jsonMode {
		ios.Out = &held
		defer func() { ios.Out = out }()
	}
	root.SetArgs(args)
	root.SetIn(ios.In)
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	cmd, err := root.ExecuteContextC(ctx)
	code, msg, printed := ExitOK, "", false
	switch {
	case err == nil:
	case ctx.Err() != nil:
		code, msg = ExitInterrupted, "interrupted"
		if cmd != nil && cmd.Annotations[resumesAnnotation] == "true" {
			msg = "interrupted; the same command resumes"
		}
	default:
		code, msg = classify(err)
		var s SilentExit
		var r *Reported
		switch {
		case errors.As(err, &r): // the verb reported; this is its one line
			msg = termtext.Clean(redact.String(r.Summary))
		case errors.As(err, &s): // the verb reported in its own words
			printed, msg = true, codeWords(code)
		}
	}
	if jsonMode {
		ios.Out = out
		if jsonFlagSet(cmd, args) {
			if werr := writeResult(out, Schema(cmd), held.Bytes(), msg, code); werr != nil && code == ExitOK {
				code, msg, printed = ExitFailure, werr.Error(), false
			}
		} else {
			_, _ = out.Write(held.Bytes())
		}
	}
	if msg != "" && !printed {
		Notef(ios.ErrOut, "%s", msg)
	}
	return code
}

// Notef prints one of kiln's own lines to w, "kiln: " and the message. On
// a terminal it is wrapped at its width under the message (a person reads
// it there); to a pipe or a log it stays one line, whole for grep.
func Notef(w io.Writer, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if !IsTerminal(w) {
		fmt.Fprintf(w, "kiln: %s\n", msg)
		return
	}
	termtable.Fprintw(w, TermWidth(w), "kiln: ", "kiln: ", msg)
}

// classify maps a verb's error to its exit code and the message printed
// (redacted: no credential in what kiln prints, whichever package formed
// the error; layers redacts where registry errors form).
func classify(err error) (int, string) {
	var s SilentExit
	if errors.As(err, &s) {
		return int(s), ""
	}
	var r *Reported
	if errors.As(err, &r) {
		return r.Code, ""
	}
	code := ExitFailure
	var ee *ExitError
	if errors.As(err, &ee) {
		code = ee.Code
	} else if isCobraUsage(err) {
		code = ExitUsage
	}
	// No terminal escape either, from the error bodies and artifact text
	// an error may quote.
	return code, termtext.Clean(redact.String(err.Error()))
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
