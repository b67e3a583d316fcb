package verbkit

import (
	"context"
	"sync"

	"github.com/moby/buildkit/client"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/slim"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/targets"
)

// Factory is what a verb that reaches registries, builders or hosts is
// built from: cmdutil's Factory (streams, version, re-entry) and the
// dependencies only such verbs have.
//
// Its dependencies (Registry, BuildKit, OpenTarget) are functions, made
// when a verb first calls them and not when the verb is built: kiln
// version connects to nothing, and a test replaces any one of them.
type Factory struct {
	*cmdutil.Factory
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

// New is the Factory cmd/kiln runs verbs from: streams ios, build b,
// exec for kiln's own re-entry, and the real dependencies, each made on
// first use (the registry options once, then shared).
func New(ios *cmdutil.IO, b cmdutil.BuildInfo, exec func(ctx context.Context, args []string, ios *cmdutil.IO) int) *Factory {
	return &Factory{
		Factory:    &cmdutil.Factory{IO: ios, Version: b.Version, Build: b, Exec: exec},
		Registry:   sync.OnceValues(func() ([]registry.Option, error) { return nil, nil }),
		BuildKit:   builder.Connect,
		OpenTarget: targets.Open,
	}
}

// WithIO is a copy of f whose verbs write to ios (kiln's re-entry runs a
// verb on other streams); f itself is unchanged.
func (f *Factory) WithIO(ios *cmdutil.IO) *Factory {
	base := *f.Factory
	base.IO = ios
	g := *f
	g.Factory = &base
	return &g
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

// Verb builds a verb's command from a Factory.
type Verb = func(*Factory) *cobra.Command

// Light wires a verb that needs only cmdutil's Factory (recipes, fatbin)
// among the others.
func Light(newCmd func(*cmdutil.Factory) *cobra.Command) Verb {
	return func(f *Factory) *cobra.Command { return newCmd(f.Factory) }
}

// NewRoot makes kiln's root command with the verbs verbs build from f, in
// that order (cmdutil.NewRoot), their flags completed as cmdutil's and
// flagCompletions say.
func NewRoot(f *Factory, verbs ...Verb) *cobra.Command {
	cmds := make([]*cobra.Command, len(verbs))
	for i, v := range verbs {
		cmds[i] = v(f)
	}
	root := cmdutil.NewRoot(f.Factory, cmds...)
	cmdutil.CompleteFlags(root, flagCompletions)
	return root
}

// flagCompletions complete the flags whose words come from the packages
// this toolbox wires.
var flagCompletions = map[string]cobra.CompletionFunc{
	"policy": completePolicies,
	"target": completeTargets,
}

// completePolicies offers slim's built-in policies; a policy file
// completes as a file name.
func completePolicies(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return slim.BuiltinPolicies, cobra.ShellCompDirectiveDefault
}

// completeTargets offers warm's target kinds.
func completeTargets(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return []cobra.Completion{
		cobra.CompletionWithDesc("containerd", "the host's containerd ("+warm.DefaultContainerdSocket+"; containerd:SOCKET for another)"),
		cobra.CompletionWithDesc("docker", "the host's Docker ("+warm.DefaultDockerSocket+"; docker:SOCKET for another)"),
		cobra.CompletionWithDesc("oci:", "an OCI image layout directory (oci:DIR)"),
	}, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}
