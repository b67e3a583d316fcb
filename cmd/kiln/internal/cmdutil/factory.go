package cmdutil

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Factory is what a verb is built from: its streams and the few things a
// verb cannot make for itself. Verbs take what they need from it when
// they run, so tests hand in a Factory of buffers.
type Factory struct {
	IO *IO
	// Version is kiln's version (set at link time in cmd/kiln), recorded
	// in SBOMs, provenance parameters and the fleet's pod image tag.
	Version string
	// Exec runs kiln itself with args on these streams and returns the
	// exit code: kiln warm status --node runs its own dry run through it.
	Exec func(ctx context.Context, args []string, ios *IO) int
}

// VersionTag is the image tag of this kiln build ("latest" for a
// development build).
func (f *Factory) VersionTag() string {
	if f.Version == "dev" || f.Version == "" {
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

Exit codes: 0 ok, 1 failure, 2 usage, 3 a --ci rule broken, 4 a signature
did not verify (verify, warm --verify-key).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: err}
	})
	root.AddCommand(newVersionCmd(f))
	for _, add := range verbs {
		root.AddCommand(add(f))
	}
	return root
}

func newVersionCmd(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print kiln's version",
		Example: "  kiln version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := f.Version
			if bi, ok := debug.ReadBuildInfo(); ok && (v == "dev" || v == "") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				v = bi.Main.Version
			}
			fmt.Fprintf(f.IO.Out, "kiln %s\n", v)
			return nil
		},
	}
}
