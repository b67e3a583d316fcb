package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/internal/suggest"
)

// Factory is what every verb is built from: its streams, kiln's
// version and kiln's own re-entry. It holds nothing that reaches a
// registry, a builder or a host: the verbs that do take verbkit.Factory,
// which adds those dependencies to this one, so a verb that needs none of
// them (recipes, fatbin) compiles none of them. Tests hand in a Factory
// of buffers.
type Factory struct {
	IO *IO
	// Version is kiln's version (Build.Version), recorded in SBOMs,
	// provenance parameters and the fleet's pod image tag.
	Version string
	// Build is what kiln version and kiln --version print.
	Build BuildInfo
	// Exec runs kiln itself with args on these streams and returns the
	// exit code: kiln warm status --node runs its own dry run through it.
	Exec func(ctx context.Context, args []string, ios *IO) int
}

// Run ends a verb's RunE: runF(opts) when a test gave one (it stops at
// the parsed options), else the verb's own run(ctx, opts).
func Run[O any](ctx context.Context, opts *O, runF func(*O) error, run func(context.Context, *O) error) error {
	if runF != nil {
		return runF(opts)
	}
	return run(ctx, opts)
}

// Leaf wires a verb whose constructor takes a runF (gh's shape,
// NewCmdX(f, runF)) into a root, with runF nil: the command runs its own
// workflow. Tests that stop at the parsed options call NewCmdX with a
// runF instead.
func Leaf[F, O any](newCmd func(F, func(*O) error) *cobra.Command) func(F) *cobra.Command {
	return func(f F) *cobra.Command { return newCmd(f, nil) }
}

// VersionTag is the image tag of this kiln build: its release version,
// or "latest" for a development build (a pseudo-version or "dev").
func (f *Factory) VersionTag() string {
	if !IsRelease(f.Version) {
		return "latest"
	}
	return f.Version
}

// NewRoot makes kiln's root command with the verbs cmds, in that order
// (cobra's help order), and the version verb; every flag of theirs that
// flagCompletions names completes as it says (CompleteFlags adds more).
// verbkit.NewRoot builds the verbs from their Factory: the one place
// verbs are wired, for cmd/kiln with all of them and for a verb's tests
// with its own.
func NewRoot(f *Factory, cmds ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   "kiln",
		Short: "Build slim CUDA images and get them onto GPU hosts fast",
		Long: `kiln builds slim, reproducible CUDA container images from pinned recipes,
analyzes and slims existing images, moves model weights out of layers and
pre-warms layer caches on GPU hosts.

Images are named the same way by every command:
  [REGISTRY/]REPO[:TAG|@sha256:...]  a registry; ubuntu:24.04 is
                                     docker.io/library/ubuntu:24.04
  docker://REF                       the same, as skopeo writes it
  oci:DIR[:TAG|@sha256:...]          an OCI image layout
  docker-archive:FILE.tar[:TAG]      a 'docker save' archive
  docker-daemon:NAME[:TAG]           an image in the local Docker daemon

With --json every command prints exactly one JSON object on stdout, also
on failure: "schema", "ok", and on failure "error" and "exit_code"
(docs/schema/ holds the schemas).

` + ExitCodesHelp,
		Version:       f.buildInfo().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}")
	root.PersistentPreRun = func(c *cobra.Command, _ []string) { warnAliases(c) }
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: flagSuggestion(c, err)}
	})
	root.AddCommand(newVersionCmd(f))
	root.AddCommand(cmds...)
	refuseUnknownSubcommands(root)
	CompleteFlags(root, flagCompletions)
	setHelp(root)
	return root
}

// buildInfo is f.Build, or a Factory's bare Version when a test made it
// without one.
func (f *Factory) buildInfo() BuildInfo {
	if f.Build.Version != "" {
		return f.Build
	}
	return NewBuildInfo(nil, f.Version, "", "")
}

func newVersionCmd(f *Factory) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print kiln's version, commit, build date and Go version",
		Long: `Print kiln's version, commit, build date and Go version (also kiln --version).

The version is the module version go install recorded (kiln@v1.2.3), or
a pseudo-version for a build from a git checkout; the commit and its date
come from the build's VCS stamp, with (modified) when the work tree had
uncommitted changes.`,
		Example: "  kiln version\n  kiln --version\n  kiln version --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b := f.buildInfo()
			if asJSON {
				return WriteJSON(f.IO.Out, struct {
					Schema string `json:"schema"`
					BuildInfo
				}{"kiln.version/v1", b})
			}
			fmt.Fprint(f.IO.Out, b.String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return SetSchema(cmd, "kiln.version/v1")
}

// refuseUnknownSubcommands makes every command below the root that has
// subcommands refuse a word that names none of them, as the root does:
// exit 2, the command path, and the nearest subcommand (cobra printed the
// group's help and exited 0 for `kiln weights pul x`).
func refuseUnknownSubcommands(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c == root || !c.HasSubCommands() {
			return
		}
		// A group that takes arguments of its own (kiln warm IMAGE…) keeps
		// them: only what its own rule refuses is an unknown subcommand.
		own := c.Args
		c.SuggestionsMinimumDistance = 2
		c.Args = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				if own != nil {
					return own(c, args)
				}
				return nil
			}
			if own != nil && own(c, args) == nil {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf("; did you mean %q?", s[0])
			} else {
				msg += fmt.Sprintf(" (%s --help lists them)", c.CommandPath())
			}
			return &ExitError{Code: ExitUsage, Err: errors.New(msg)}
		}
		if c.Run == nil && c.RunE == nil {
			c.RunE = func(c *cobra.Command, args []string) error { return c.Help() }
		}
	}
	walk(root)
}

// flagSuggestion adds the nearest flag name to cobra's "unknown flag"
// error (`--targt`: did you mean --target?).
func flagSuggestion(c *cobra.Command, err error) error {
	const prefix = "unknown flag: --"
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return err
	}
	typed := strings.TrimPrefix(msg, prefix)
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	best := suggest.Nearest(typed, names)
	if best == "" {
		return fmt.Errorf("%v (%s --help lists the flags)", err, c.CommandPath())
	}
	return fmt.Errorf("%v; did you mean --%s?", err, best)
}
