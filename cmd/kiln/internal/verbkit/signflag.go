package verbkit

import (
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/registry"
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
		return nil, cmdutil.UsageErr("--sign-format: %q is not one of bundle, legacy", f.SignFormat)
	}
	k, err := sign.LoadSigner(f.SignKey, nil)
	if err != nil {
		return nil, cmdutil.UsageErr("--sign-key: %v", err)
	}
	return k, nil
}

// CheckDest refuses --sign-key for a destination that is not a registry
// (a signature is stored next to the manifest, in its repository).
func (f *SignFlag) CheckDest(dest layers.Ref) error {
	if f.SignKey == "" {
		return nil
	}
	if dest.Kind != layers.KindRegistry {
		return cmdutil.UsageErr("--sign-key: %s is not a registry reference; a signature is stored in the registry", dest)
	}
	return nil
}

// Signer is what publish.WithSign signs with: key k (LoadSigner's) in
// --sign-format, pushing with lopts. k nil (no --sign-key): nil, which
// signs nothing.
func (f *SignFlag) Signer(k *sign.Signer, lopts []registry.Option) *publish.Signer {
	if k == nil {
		return nil
	}
	return &publish.Signer{Key: k, Format: f.SignFormat, Layers: lopts}
}
