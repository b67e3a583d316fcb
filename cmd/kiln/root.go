package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

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

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

// IO bundles the streams a command writes to; tests hand in buffers.
type IO struct {
	In     io.Reader
	Out    io.Writer // data: tables, JSON
	ErrOut io.Writer // progress, warnings, errors
}

// exitError carries an exit code through cobra's error return.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr marks err as a command-line mistake (exit 2).
func usageErr(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

// silentExit exits with code without printing anything more (the command
// already reported, e.g. a failed --ci gate or an incompatible verdict).
type silentExit int

func (s silentExit) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// Main runs kiln with args and returns the process exit code.
func Main(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	ios := &IO{In: in, Out: out, ErrOut: errOut}
	root := NewRootCmd(ios)
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var s silentExit
	if errors.As(err, &s) {
		return int(s)
	}
	code := ExitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	} else if isCobraUsage(err) {
		code = ExitUsage
	}
	// The last line of defence: no credential in what kiln prints, whichever
	// package formed the error (layers redacts where registry errors form).
	fmt.Fprintf(errOut, "kiln: %s\n", layers.Redact(err.Error()))
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

// NewRootCmd wires every verb. Commands only parse flags into an Options
// struct and call a run function that tests call directly.
func NewRootCmd(ios *IO) *cobra.Command {
	root := &cobra.Command{
		Use:   "kiln",
		Short: "Build slim CUDA images and get them onto GPU hosts fast",
		Long: `kiln builds slim, reproducible CUDA container images from pinned recipes,
analyzes and slims existing images, moves model weights out of layers and
pre-warms layer caches on GPU hosts.

Images are named the same way by every command:
  REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:...   a registry (Docker config credentials)
  oci:DIR[:TAG|@sha256:...]                       an OCI image layout
  docker-archive:FILE.tar                         a 'docker save' archive

Exit codes: 0 ok, 1 failure, 2 usage, 3 a --ci rule broken, 4 a signature\ndid not verify (verify, warm --verify-key).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	root.AddCommand(newVersionCmd(ios))
	for _, add := range subcommands {
		root.AddCommand(add(ios))
	}
	return root
}

// subcommands are kiln's verbs, wired here and nowhere else (no init
// hooks): the order is cobra's help order.
var subcommands = []func(*IO) *cobra.Command{
	newAnalyzeCmd, newBuildCmd, newCompatCmd, newConvertCmd, newFatbinCmd, newHostCmd,
	newLockCmd, newProbeRecordCmd, newRecipesCmd, newResolveCmd, newSignCmd, newSlimCmd, newVerifyCmd, newWarmCmd,
	newWeightsCmd,
}

func newVersionCmd(ios *IO) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print kiln's version",
		Example: "  kiln version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				v = bi.Main.Version
			}
			fmt.Fprintf(ios.Out, "kiln %s\n", v)
			return nil
		},
	}
}
