package signcmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/redact"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/sign"
)

// SignOptions are kiln sign's inputs.
type SignOptions struct {
	IO     *cmdutil.IO
	Ref    string
	Key    string
	Format string
	JSON   bool
	verbkit.ImageFlags
}

// signReport is kiln sign's --json object (schema kiln.sign/v1).
type signReport struct {
	Schema string       `json:"schema"`
	Signed *sign.Signed `json:"signed,omitempty"`
	Error  string       `json:"error,omitempty"`
}

const signSchema = "kiln.sign/v1"

// NewCmdSign is kiln sign IMAGE --key KEY.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdSign(f *verbkit.Factory, runF func(*SignOptions) error) *cobra.Command {
	ios := f.IO
	opts := &SignOptions{IO: ios, ImageFlags: f.ImageFlags()}
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
			return cmdutil.Run(cmd.Context(), opts, runF, runSign)
		},
	}
	opts.ImageFlags.Register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opts.Key, "key", "", "PEM private key (PKCS#8, SEC 1 or cosign's encrypted key file)")
	fl.StringVar(&opts.Format, "format", sign.FormatBundle, "bundle (cosign v3's referrer) or legacy (cosign's .sig tag)")
	fl.BoolVar(&opts.JSON, "json", false, "print one JSON object (schema kiln.sign/v1)")
	cmdutil.SetSchema(cmd, "kiln.sign/v1")
	return cmd
}

func runSign(ctx context.Context, opts *SignOptions) error {
	s, err := signOnce(ctx, opts)
	if opts.JSON {
		rep := signReport{Schema: signSchema, Signed: s}
		if err != nil {
			rep.Error = redact.String(err.Error())
		}
		if perr := cmdutil.WriteJSON(opts.IO.Out, rep); perr != nil {
			return perr
		}
	} else if err == nil {
		// Each value whole after its label, a digest within 80 columns.
		fmt.Fprintf(opts.IO.Out, "signed   %s\nimage    %s\nkey      %s\nartifact %s\n", refName(opts.Ref), s.Digest, s.KeyID, s.Artifact)
	}
	return err
}

func signOnce(ctx context.Context, opts *SignOptions) (*sign.Signed, error) {
	if opts.Key == "" {
		return nil, cmdutil.UsageErr("sign: --key is required")
	}
	if opts.Format != sign.FormatBundle && opts.Format != sign.FormatLegacy {
		return nil, cmdutil.UsageErr("--format: %q is not one of bundle, legacy", opts.Format)
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return nil, err
	}
	r, err := verbkit.CheckRef("", opts.Ref, lopts...)
	if err != nil {
		return nil, err
	}
	if r.Kind != layers.KindRegistry {
		return nil, cmdutil.UsageErr("sign: %s is not a registry reference (signatures are stored in the registry)", opts.Ref)
	}
	k, err := sign.LoadSigner(opts.Key, nil)
	if err != nil {
		return nil, cmdutil.UsageErr("--key: %v", err)
	}
	return sign.Sign(ctx, opts.Ref, k, sign.SignOptions{Format: opts.Format, Layers: lopts})
}

// VerifyOptions are kiln verify's inputs.
type VerifyOptions struct {
	IO   *cmdutil.IO
	Refs []string
	Key  string
	JSON bool
	verbkit.ImageFlags
}

// verifyReport is kiln verify's --json object (schema kiln.verify/v1).
type verifyReport struct {
	Schema   string         `json:"schema"`
	Verified bool           `json:"verified"`
	Results  []*sign.Result `json:"results"`
	Error    string         `json:"error,omitempty"`
}

const verifySchema = "kiln.verify/v1"

// NewCmdVerify is kiln verify IMAGE... --key KEY.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdVerify(f *verbkit.Factory, runF func(*VerifyOptions) error) *cobra.Command {
	ios := f.IO
	opts := &VerifyOptions{IO: ios, ImageFlags: f.ImageFlags()}
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
			return cmdutil.Run(cmd.Context(), opts, runF, runVerify)
		},
	}
	opts.ImageFlags.Register(cmd)
	cmd.Flags().StringVar(&opts.Key, "key", "", "PEM public key or policy file (schema kiln.verify-policy/v1)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print one JSON object (schema kiln.verify/v1)")
	cmdutil.SetSchema(cmd, "kiln.verify/v1")
	return cmd
}

func runVerify(ctx context.Context, opts *VerifyOptions) error {
	rep := verifyReport{Schema: verifySchema, Results: []*sign.Result{}}
	err := func() error {
		if opts.Key == "" {
			return cmdutil.UsageErr("verify: --key is required")
		}
		lopts, err := opts.LayersOptions()
		if err != nil {
			return err
		}
		pol, err := sign.LoadPolicy(opts.Key)
		if err != nil {
			return cmdutil.UsageErr("--key %v", err)
		}
		var refused []string
		for _, ref := range opts.Refs {
			r, err := verbkit.CheckRef("", ref, lopts...)
			if err != nil {
				return err
			}
			if r.Kind != layers.KindRegistry {
				return cmdutil.UsageErr("verify: %s is not a registry reference", ref)
			}
			res, err := pol.VerifyRef(ctx, ref, lopts...)
			if err != nil {
				return err
			}
			rep.Results = append(rep.Results, res)
			if !res.Verified {
				refused = append(refused, (&sign.Error{Result: res}).Error())
			}
		}
		if len(refused) > 0 {
			return cmdutil.Exit(cmdutil.ExitUnverified, fmt.Errorf("not verified: %s", refused[0]))
		}
		rep.Verified = true
		return nil
	}()
	if err != nil {
		rep.Error = redact.String(err.Error())
	}
	if opts.JSON {
		if perr := cmdutil.WriteJSON(opts.IO.Out, rep); perr != nil {
			return perr
		}
	} else {
		for _, r := range rep.Results {
			w := cmdutil.TermWidth(opts.IO.Out)
			if r.Verified {
				termtable.Fprintw(opts.IO.Out, w, "", "  ", fmt.Sprintf("%s: verified (%s)", r.Ref, r.Format))
				fmt.Fprintf(opts.IO.Out, "  key  %s\n", r.KeyID)
			} else {
				termtable.Fprintw(opts.IO.Out, w, "", "  ", fmt.Sprintf("%s: NOT VERIFIED: %s: %s", r.Ref, r.Reason, r.Detail))
			}
		}
	}
	return err
}

// refName is ref without a digest it names (the signed digest follows it).
func refName(ref string) string {
	if i := strings.Index(ref, "@sha256:"); i >= 0 {
		return ref[:i]
	}
	return ref
}
