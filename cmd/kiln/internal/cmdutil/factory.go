package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/moby/buildkit/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/internal/suggest"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/targets"
)

// Factory is what a verb is built from: its streams and the few things a
// verb cannot make for itself. Verbs take what they need from it when
// they run, so tests hand in a Factory of buffers.
//
// Its dependencies (Registry, BuildKit, OpenTarget) are functions, made
// when a verb first calls them and not when the verb is built: kiln
// version connects to nothing, and a test replaces any one of them.
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
	// Registry is the registry options (credentials, transport) every
	// image a verb reads or writes starts from, made once on first use
	// (ImageFlags.LayersOptions puts a verb's --platform and
	// --insecure-registry after them). nil: layers' defaults.
	Registry func() ([]registry.Option, error)
	// BuildKit connects to the builder at addr (--builder; "" is
	// $BUILDKIT_HOST, then the standard sockets) and returns the client
	// and the address it reached; the caller closes the client.
	BuildKit func(ctx context.Context, addr string, tls builder.TLS) (*client.Client, string, error)
	// OpenTarget opens where kiln warm puts images (containerd, docker,
	// an OCI layout); the caller closes it.
	OpenTarget func(ctx context.Context, spec warm.TargetSpec, o targets.Options) (warm.Target, error)
}

// NewFactory is the Factory cmd/kiln runs verbs from: streams ios, build
// b, exec for kiln's own re-entry, and the real dependencies, each made
// on first use (the registry options once, then shared).
func NewFactory(ios *IO, b BuildInfo, exec func(ctx context.Context, args []string, ios *IO) int) *Factory {
	return &Factory{
		IO: ios, Version: b.Version, Build: b, Exec: exec,
		Registry:   sync.OnceValues(func() ([]registry.Option, error) { return nil, nil }),
		BuildKit:   builder.Connect,
		OpenTarget: targets.Open,
	}
}

// ImageFlags are the image flags of a verb built from f: their options
// start from f.Registry's, and mirror notes go to f's stderr.
func (f *Factory) ImageFlags() ImageFlags {
	fl := ImageFlags{Registry: f.Registry}
	if f.IO != nil {
		fl.Note = f.IO.ErrOut
	}
	return fl
}

// Connect is f.BuildKit, or builder.Connect for a Factory made without
// one.
func (f *Factory) Connect(ctx context.Context, addr string, tls builder.TLS) (*client.Client, string, error) {
	if f.BuildKit != nil {
		return f.BuildKit(ctx, addr, tls)
	}
	return builder.Connect(ctx, addr, tls)
}

// Open is f.OpenTarget, or targets.Open for a Factory made without
// one.
func (f *Factory) Open(ctx context.Context, spec warm.TargetSpec, o targets.Options) (warm.Target, error) {
	if f.OpenTarget != nil {
		return f.OpenTarget(ctx, spec, o)
	}
	return targets.Open(ctx, spec, o)
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
func Leaf[O any](newCmd func(*Factory, func(*O) error) *cobra.Command) func(*Factory) *cobra.Command {
	return func(f *Factory) *cobra.Command { return newCmd(f, nil) }
}

// VersionTag is the image tag of this kiln build: its release version,
// or "latest" for a development build (a pseudo-version or "dev").
func (f *Factory) VersionTag() string {
	if !IsRelease(f.Version) {
		return "latest"
	}
	return f.Version
}

// NewRoot makes kiln's root command with the verbs verbs build from f,
// in that order (cobra's help order): the one place verbs are wired, for
// cmd/kiln with all of them and for a verb's tests with its own.
func NewRoot(f *Factory, verbs ...func(*Factory) *cobra.Command) *cobra.Command {
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
	for _, add := range verbs {
		root.AddCommand(add(f))
	}
	refuseUnknownSubcommands(root)
	registerCompletions(root)
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
