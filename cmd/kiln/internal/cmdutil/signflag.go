package cmdutil

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/sign"
)

// SignFlag is --sign-key on commands that push (build, slim, convert,
// weights strip): after the push, the pushed manifest is signed by its
// digest.
type SignFlag struct {
	SignKey    string
	SignFormat string
}

// Register adds --sign-key and --sign-format to cmd.
func (f *SignFlag) Register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.SignKey, "sign-key", "", "sign what was pushed with this PEM private key (kiln sign's --key; cosign's format)")
	cmd.Flags().StringVar(&f.SignFormat, "sign-format", sign.FormatBundle, "with --sign-key: bundle (cosign v3's referrer) or legacy (.sig tag)")
}

// LoadSigner reads the key before any work is done: a bad key or password
// fails the command before a build or a push. No --sign-key: nil.
func (f *SignFlag) LoadSigner() (*sign.Signer, error) {
	if f.SignKey == "" {
		return nil, nil
	}
	if f.SignFormat != sign.FormatBundle && f.SignFormat != sign.FormatLegacy {
		return nil, UsageErr("--sign-format: %q is not one of bundle, legacy", f.SignFormat)
	}
	k, err := sign.LoadSigner(f.SignKey, nil)
	if err != nil {
		return nil, UsageErr("--sign-key: %v", err)
	}
	return k, nil
}

// CheckDest refuses --sign-key for a destination that is not a registry
// (a signature is stored next to the manifest, in its repository).
func (f *SignFlag) CheckDest(dest string, lopts []layers.Option) error {
	if f.SignKey == "" {
		return nil
	}
	r, err := layers.ParseRef(dest, lopts...)
	if err != nil {
		return UsageErr("%v", err)
	}
	if r.Kind != layers.KindRegistry {
		return UsageErr("--sign-key: %s is not a registry reference; a signature is stored in the registry", dest)
	}
	return nil
}

// SignPushed signs dest's manifest dg, just written: the descriptor is
// read back by digest (HEAD), so what is signed is what the registry
// holds, with no tag lookup in between. k nil: nothing to do.
func (f *SignFlag) SignPushed(ctx context.Context, k *sign.Signer, dest string, dg v1.Hash, lopts []layers.Option) (*sign.Signed, error) {
	if k == nil {
		return nil, nil
	}
	r, err := layers.ParseRef(dest, lopts...)
	if err != nil {
		return nil, err
	}
	repo := r.Name.Context()
	desc, err := layers.HeadDigest(ctx, repo.Digest(dg.String()).String(), lopts...)
	if err != nil {
		return nil, fmt.Errorf("--sign-key: %w", err)
	}
	s, err := sign.SignDigest(ctx, repo, *desc, k, sign.SignOptions{Format: f.SignFormat, Layers: lopts})
	if err != nil {
		return nil, fmt.Errorf("--sign-key: %w", err)
	}
	return s, nil
}

// SignArtifact signs ref (REPO@DIGEST, e.g. a weights artifact slim or
// weights strip just published) when it is in a registry; an OCI layout
// has nowhere to store a signature, so nothing is signed (nil, nil).
func (f *SignFlag) SignArtifact(ctx context.Context, k *sign.Signer, ref string, lopts []layers.Option) (*sign.Signed, error) {
	r, err := layers.ParseRef(ref, lopts...)
	if err != nil || r.Kind != layers.KindRegistry {
		return nil, err
	}
	d, ok := r.Name.(name.Digest)
	if !ok {
		return nil, fmt.Errorf("--sign-key: %s is not pinned by digest", ref)
	}
	h, err := v1.NewHash(d.DigestStr())
	if err != nil {
		return nil, err
	}
	return f.SignPushed(ctx, k, ref, h, lopts)
}
