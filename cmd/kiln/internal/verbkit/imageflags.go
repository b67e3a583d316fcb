package verbkit

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// ImageFlags are the flags every command that reads images shares.
type ImageFlags struct {
	Platform         string
	InsecureRegistry []string
	// Mirror is --mirror (MirrorOptions: REGISTRY=ENDPOINT, or ENDPOINT
	// for Docker Hub).
	Mirror []string
	// Note is where a verb says which mirror it read an image through
	// (the Factory's stderr); nil: nowhere.
	Note io.Writer

	// Registry is the registry options the flags' start from (a
	// Factory's, Factory.ImageFlags); nil: layers' defaults.
	Registry func() ([]registry.Option, error)

	// set says whether --platform was given: only then is an image of
	// another platform refused (layers.WithExactPlatform).
	set func() bool
}

// Register adds --platform, --insecure-registry and --mirror to cmd.
func (f *ImageFlags) Register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.Platform, "platform", "linux/amd64", "platform to read (linux/amd64, linux/arm64): selects it from a multi-platform image; given, a single-platform image of another platform is refused")
	f.set = func() bool { return cmd.Flags().Changed("platform") }
	cmd.Flags().StringSliceVar(&f.InsecureRegistry, "insecure-registry", nil, "registry host that speaks plain HTTP (repeatable; loopback hosts always may)")
	MirrorFlag(cmd.Flags(), &f.Mirror)
}

// LayersOptions turns the flags into layers options; a bad platform is a
// usage error. A --platform given on the command line is exact: a
// single-platform image of another platform is refused, not read.
// Registry references are read through their registry's mirrors first
// (MirrorOptions: --mirror, $KILN_MIRROR, the host's files). The
// options carry a registry Pool of their own (registry.Pooled): all that
// a verb reads, writes, attaches and signs through them goes to each
// repository through one client, after one token exchange.
func (f *ImageFlags) LayersOptions() ([]registry.Option, error) {
	p, err := layers.ParsePlatform(f.Platform)
	if err != nil {
		return nil, cmdutil.UsageErr("--platform: %v", err)
	}
	sel := layers.WithPlatform(p)
	if f.set != nil && f.set() {
		sel = layers.WithExactPlatform(p)
	}
	var base []registry.Option
	if f.Registry != nil {
		if base, err = f.Registry(); err != nil {
			return nil, err
		}
	}
	mirrors, err := MirrorOptions(f.Mirror, f.Note)
	if err != nil {
		return nil, err
	}
	opts := append(base[:len(base):len(base)], sel, registry.WithInsecureRegistries(f.InsecureRegistry...))
	return registry.Pooled(append(opts, mirrors...)), nil
}

// CheckRef parses an image reference named on the command line; one that
// does not parse is a usage error (exit 2) from every verb, before any
// work starts. what names the flag ("--to") or is "" for an argument.
func CheckRef(what, ref string, opts ...registry.Option) (layers.Ref, error) {
	r, err := layers.ParseRef(ref, opts...)
	if err != nil {
		if what != "" {
			return r, cmdutil.UsageErr("%s: %v", what, err)
		}
		return r, cmdutil.UsageErr("%v", err)
	}
	return r, nil
}

// OpenImage opens the image a verb reads (its argument, ref): a reference
// that does not parse is a usage error (CheckRef), one that cannot be read
// is the error layers.Open gives. The caller closes the image.
func OpenImage(ctx context.Context, ref string, opts ...registry.Option) (*layers.Image, error) {
	r, err := CheckRef("", ref, opts...)
	if err != nil {
		return nil, err
	}
	return layers.Open(ctx, r, opts...)
}
