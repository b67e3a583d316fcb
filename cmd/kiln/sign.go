package main

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/sign"
	"github.com/spf13/cobra"
)

// SignOptions are kiln sign's inputs.
type SignOptions struct {
	IO     *IO
	Ref    string
	Key    string
	Format string
	JSON   bool
	imageFlags
}

// signReport is kiln sign's --json object (schema kiln.sign/v1).
type signReport struct {
	Schema string       `json:"schema"`
	Signed *sign.Signed `json:"signed,omitempty"`
	Error  string       `json:"error,omitempty"`
}

const signSchema = "kiln.sign/v1"

func newSignCmd(ios *IO) *cobra.Command {
	opts := &SignOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "sign REF --key KEY",
		Short: "Sign an image or artifact in the registry (cosign's format)",
		Long: `Signs the manifest REF resolves to with a private key and stores the
signature next to it, in the format cosign v3 writes and 'cosign verify
--key' accepts: a Sigstore bundle (DSSE, in-toto statement naming the
digest) as an OCI referrer of the manifest, listed by the registry's
referrers API or, on registries without one (distribution 2.8), in the
referrers tag schema's index (sha256-<hex>). --format legacy writes
cosign's older simple-signing signature under the sha256-<hex>.sig tag.

KEY is a PEM private key: PKCS#8 (openssl genpkey -algorithm EC -pkeyopt
ec_paramgen_curve:P-256), SEC 1 (openssl ecparam -genkey) or cosign's
encrypted key file (cosign generate-key-pair; password from
COSIGN_PASSWORD). ECDSA P-256 only. Nothing is sent to Fulcio or Rekor:
keyless signing needs them and is not offered (docs/sign.md).

Exit codes: 0 signed, 1 failure, 2 usage. --json prints one object
(schema kiln.sign/v1), also on failure.`,
		Example: `  kiln sign 127.0.0.1:5000/acme/serve:1.2 --key cosign.key
  kiln sign reg.local/acme/serve@sha256:... --key key.pem --json
  kiln sign reg.local/acme/weights:llama --key key.pem --format legacy`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Ref = args[0]
			return runSign(cmd.Context(), opts)
		},
	}
	opts.imageFlags.register(cmd)
	f := cmd.Flags()
	f.StringVar(&opts.Key, "key", "", "PEM private key (PKCS#8, SEC 1 or cosign's encrypted key file)")
	f.StringVar(&opts.Format, "format", sign.FormatBundle, "bundle (cosign v3's referrer) or legacy (cosign's .sig tag)")
	f.BoolVar(&opts.JSON, "json", false, "print one JSON object (schema kiln.sign/v1)")
	return cmd
}

func runSign(ctx context.Context, opts *SignOptions) error {
	s, err := signOnce(ctx, opts)
	if opts.JSON {
		rep := signReport{Schema: signSchema, Signed: s}
		if err != nil {
			rep.Error = layers.Redact(err.Error())
		}
		if perr := writeJSON(opts.IO.Out, rep); perr != nil {
			return perr
		}
	} else if err == nil {
		fmt.Fprintf(opts.IO.Out, "signed %s (%s) with key %s: %s\n", opts.Ref, s.Digest, s.KeyID, s.Artifact)
	}
	return err
}

func signOnce(ctx context.Context, opts *SignOptions) (*sign.Signed, error) {
	if opts.Key == "" {
		return nil, usageErr("sign: --key is required")
	}
	if opts.Format != sign.FormatBundle && opts.Format != sign.FormatLegacy {
		return nil, usageErr("--format: %q is not one of bundle, legacy", opts.Format)
	}
	lopts, err := opts.options()
	if err != nil {
		return nil, err
	}
	r, err := layers.ParseRef(opts.Ref, lopts...)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if r.Kind != layers.KindRegistry {
		return nil, usageErr("sign: %s is not a registry reference (signatures are stored in the registry)", opts.Ref)
	}
	k, err := sign.LoadSigner(opts.Key, nil)
	if err != nil {
		return nil, usageErr("--key: %v", err)
	}
	return sign.Sign(ctx, opts.Ref, k, sign.SignOptions{Format: opts.Format, Layers: lopts})
}

// signFlag is --sign-key on commands that push (build, slim, convert,
// weights strip): after the push, the pushed manifest is signed by its
// digest.
type signFlag struct {
	SignKey    string
	SignFormat string
}

func (f *signFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.SignKey, "sign-key", "", "sign what was pushed with this PEM private key (kiln sign's --key; cosign's format)")
	cmd.Flags().StringVar(&f.SignFormat, "sign-format", sign.FormatBundle, "with --sign-key: bundle (cosign v3's referrer) or legacy (.sig tag)")
}

// load reads the key before any work is done: a bad key or password fails
// the command before a build or a push.
func (f *signFlag) load() (*sign.Signer, error) {
	if f.SignKey == "" {
		return nil, nil
	}
	if f.SignFormat != sign.FormatBundle && f.SignFormat != sign.FormatLegacy {
		return nil, usageErr("--sign-format: %q is not one of bundle, legacy", f.SignFormat)
	}
	k, err := sign.LoadSigner(f.SignKey, nil)
	if err != nil {
		return nil, usageErr("--sign-key: %v", err)
	}
	return k, nil
}

// checkDest refuses --sign-key for a destination that is not a registry
// (a signature is stored next to the manifest, in its repository).
func (f *signFlag) checkDest(dest string, lopts []layers.Option) error {
	if f.SignKey == "" {
		return nil
	}
	r, err := layers.ParseRef(dest, lopts...)
	if err != nil {
		return usageErr("%v", err)
	}
	if r.Kind != layers.KindRegistry {
		return usageErr("--sign-key: %s is not a registry reference; a signature is stored in the registry", dest)
	}
	return nil
}

// signPushed signs dest's manifest dg, just written: the descriptor is
// read back by digest (HEAD), so what is signed is what the registry
// holds, with no tag lookup in between.
func (f *signFlag) signPushed(ctx context.Context, k *sign.Signer, dest string, dg v1.Hash, lopts []layers.Option) (*sign.Signed, error) {
	if k == nil {
		return nil, nil
	}
	r, err := layers.ParseRef(dest, lopts...)
	if err != nil {
		return nil, err
	}
	repo := r.Name.Context()
	desc, err := remote.Head(repo.Digest(dg.String()), layers.RemoteOptions(ctx, lopts...)...)
	if err != nil {
		return nil, fmt.Errorf("--sign-key: %s@%s: %w", repo, dg, layers.RedactError(err))
	}
	s, err := sign.SignDigest(ctx, repo, *desc, k, sign.SignOptions{Format: f.SignFormat, Layers: lopts})
	if err != nil {
		return nil, fmt.Errorf("--sign-key: %w", err)
	}
	return s, nil
}

// signArtifact signs ref (REPO@DIGEST, e.g. a weights artifact slim or
// weights strip just published) when it is in a registry; an OCI layout
// has nowhere to store a signature, so nothing is signed (nil, nil).
func signArtifact(ctx context.Context, f *signFlag, k *sign.Signer, ref string, lopts []layers.Option) (*sign.Signed, error) {
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
	return f.signPushed(ctx, k, ref, h, lopts)
}

// headDigest HEADs ref (REPO@DIGEST) and checks the registry answers
// that digest.
func headDigest(ctx context.Context, ref string, lopts []layers.Option) (*v1.Descriptor, error) {
	r, err := layers.ParseRef(ref, lopts...)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Head(r.Name, layers.RemoteOptions(ctx, lopts...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, layers.RedactError(err))
	}
	if d, ok := r.Name.(name.Digest); ok && d.DigestStr() != desc.Digest.String() {
		return nil, fmt.Errorf("%s: registry answers digest %s", ref, desc.Digest)
	}
	return desc, nil
}

// VerifyOptions are kiln verify's inputs.
type VerifyOptions struct {
	IO   *IO
	Refs []string
	Key  string
	JSON bool
	imageFlags
}

// verifyReport is kiln verify's --json object (schema kiln.verify/v1).
type verifyReport struct {
	Schema   string         `json:"schema"`
	Verified bool           `json:"verified"`
	Results  []*sign.Result `json:"results"`
	Error    string         `json:"error,omitempty"`
}

const verifySchema = "kiln.verify/v1"

func newVerifyCmd(ios *IO) *cobra.Command {
	opts := &VerifyOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "verify REF... --key PUBKEY|POLICY",
		Short: "Verify the cosign signatures of images or artifacts",
		Long: `Checks that each REF's manifest is signed by a trusted key: a cosign v3
bundle among its referrers (referrers API, else the referrers tag schema)
or a legacy sha256-<hex>.sig signature, made by kiln sign or by cosign
sign --key. --key is a PEM public key (cosign.pub, openssl pkey -pubout)
or a policy file naming keys per registry or repository (docs/sign.md).
It is the same check kiln warm --verify-key runs before fetching a layer.

Exit codes: 0 every REF verified, 4 one did not, 1 a registry error,
2 usage. --json prints one object (schema kiln.verify/v1), also on
failure; each result's reason is missing, wrong-key, tampered or invalid.`,
		Example: `  kiln verify 127.0.0.1:5000/acme/serve:1.2 --key cosign.pub
  kiln verify reg.local/acme/serve:1.2 reg.local/acme/weights:llama --key /etc/kiln/policy.yaml --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Refs = args
			return runVerify(cmd.Context(), opts)
		},
	}
	opts.imageFlags.register(cmd)
	cmd.Flags().StringVar(&opts.Key, "key", "", "PEM public key or policy file (schema kiln.verify-policy/v1)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print one JSON object (schema kiln.verify/v1)")
	return cmd
}

func runVerify(ctx context.Context, opts *VerifyOptions) error {
	rep := verifyReport{Schema: verifySchema, Results: []*sign.Result{}}
	err := func() error {
		if opts.Key == "" {
			return usageErr("verify: --key is required")
		}
		lopts, err := opts.options()
		if err != nil {
			return err
		}
		pol, err := sign.LoadPolicy(opts.Key)
		if err != nil {
			return usageErr("%v", err)
		}
		var refused []string
		for _, ref := range opts.Refs {
			res, err := verifyRef(ctx, ref, pol, lopts)
			if err != nil {
				return err
			}
			rep.Results = append(rep.Results, res)
			if !res.Verified {
				refused = append(refused, (&sign.Error{Result: res}).Error())
			}
		}
		if len(refused) > 0 {
			return &exitError{code: ExitUnverified, err: fmt.Errorf("not verified: %s", refused[0])}
		}
		rep.Verified = true
		return nil
	}()
	if err != nil {
		rep.Error = layers.Redact(err.Error())
	}
	if opts.JSON {
		if perr := writeJSON(opts.IO.Out, rep); perr != nil {
			return perr
		}
	} else {
		for _, r := range rep.Results {
			if r.Verified {
				fmt.Fprintf(opts.IO.Out, "%s: verified (%s, key %s)\n", r.Ref, r.Format, r.KeyID)
			} else {
				fmt.Fprintf(opts.IO.Out, "%s: NOT VERIFIED: %s: %s\n", r.Ref, r.Reason, r.Detail)
			}
		}
	}
	return err
}

// verifyRef resolves ref to its digest and verifies it under pol.
func verifyRef(ctx context.Context, ref string, pol *sign.Policy, lopts []layers.Option) (*sign.Result, error) {
	r, err := layers.ParseRef(ref, lopts...)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if r.Kind != layers.KindRegistry {
		return nil, usageErr("verify: %s is not a registry reference", ref)
	}
	desc, err := remote.Head(r.Name, layers.RemoteOptions(ctx, lopts...)...)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, layers.RedactError(err))
	}
	return verifyDigest(ctx, ref, r.Name.Context(), r.Name.Context(), desc.Digest, pol, lopts)
}

// verifyDigest verifies digest d, named ref, whose signatures are read
// from readRepo (a --mirror endpoint's, or repo itself); the keys are the
// ones pol names for repo (the image's real name).
func verifyDigest(ctx context.Context, ref string, repo, readRepo name.Repository, d v1.Hash, pol *sign.Policy, lopts []layers.Option) (*sign.Result, error) {
	keys, _ := pol.Keys(repo)
	if len(keys) == 0 {
		return &sign.Result{Ref: ref, Digest: d.String(), Reason: sign.ReasonWrongKey, Signatures: []sign.Found{},
			Detail: fmt.Sprintf("the policy %s names no key for %s", pol.Source, repo)}, nil
	}
	return sign.Verify(ctx, ref, readRepo, d, keys, lopts...)
}
