package warmcmd

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/warm"
)

// --verify-key on kiln warm: the signature gate runs after the warm set
// is resolved (indexes, manifests and configs read and verified by
// digest) and before the first layer or weight blob is fetched, so a host
// never holds, let alone marks ready, bytes no trusted key signed.

// verifyWarm checks every image of set (the digest its reference resolved
// to: what cosign signs) and every weights artifact of vols. It returns
// the results and, when one does not verify, an cmdutil.ExitUnverified error that
// names the image and why.
func verifyWarm(ctx context.Context, path string, set *warm.Set, vols []*warm.Volume, lopts []layers.Option) ([]*sign.Result, error) {
	pol, err := sign.LoadPolicy(path)
	if err != nil {
		return nil, cmdutil.UsageErr("%v", err)
	}
	var out []*sign.Result
	var refused []string
	check := func(refName, readRef string, d v1.Hash, note string) error {
		real, err := layers.ParseRef(refName, lopts...)
		if err != nil {
			return err
		}
		read, err := layers.ParseRef(readRef, lopts...)
		if err != nil {
			return err
		}
		if real.Kind != layers.KindRegistry || read.Kind != layers.KindRegistry {
			return cmdutil.Exit(cmdutil.ExitUnverified, fmt.Errorf("--verify-key: %s is not in a registry: it carries no signature to verify", refName))
		}
		res, err := pol.VerifyDigest(ctx, refName, real.Name.Context(), read.Name.Context(), d, lopts...)
		if err != nil {
			return err
		}
		if !res.Verified && note != "" {
			res.Detail += " (" + note + ")"
		}
		out = append(out, res)
		if !res.Verified {
			refused = append(refused, (&sign.Error{Result: res}).Error())
		}
		return nil
	}
	for _, img := range set.Images {
		d, err := v1.NewHash(img.Target.Digest.String())
		if err != nil {
			return out, err
		}
		// The signature sits next to what was read: the zstd variant's
		// repository is the image's; a mirror serves its signatures too.
		read := img.Source
		if img.Mirror != "" {
			r, err := layers.ParseRef(img.Source, lopts...)
			if err != nil {
				return out, err
			}
			read = img.Mirror + "/" + r.Name.Context().RepositoryStr() + "@" + d.String()
		}
		note := ""
		if img.Source != img.Name {
			note = "warm chose " + img.Source + ", the zstd variant: sign it too, or warm with --compression gzip"
		}
		if err := check(img.Name, read, d, note); err != nil {
			return out, err
		}
	}
	for _, v := range vols {
		if v.Resolved.Ref == "" {
			return out, cmdutil.Exit(cmdutil.ExitUnverified, fmt.Errorf("--verify-key: weights %s is a manifest file, not a registry artifact: it carries no signature to verify", v.Ref))
		}
		at := v.Resolved.Ref
		i := strings.LastIndex(at, "@")
		if i < 0 {
			return out, fmt.Errorf("--verify-key: weights %s: resolved to %s, not a digest", v.Ref, at)
		}
		d, err := v1.NewHash(at[i+1:])
		if err != nil {
			return out, fmt.Errorf("--verify-key: weights %s: %v", v.Ref, err)
		}
		// The policy applies to the artifact's own name (a label's
		// reference or the argument), read where it was resolved.
		realName := v.Ref
		if !strings.Contains(realName, "/") || strings.HasPrefix(realName, "oci:") {
			realName = at
		}
		if err := check(realName, at, d, ""); err != nil {
			return out, err
		}
	}
	if len(refused) > 0 {
		msg := refused[0]
		if len(refused) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(refused)-1)
		}
		return out, cmdutil.Exit(cmdutil.ExitUnverified, fmt.Errorf("--verify-key %s: refused before fetching any layer: %s", path, msg))
	}
	return out, nil
}

// writeSignatures prints the --verify-key outcome under warm's tables.
func writeSignatures(w io.Writer, rs []*sign.Result) {
	for _, r := range rs {
		if r.Verified {
			fmt.Fprintf(w, "signature: %s (%s): verified, %s, key %s\n", r.Ref, cmdutil.Short(r.Digest), r.Format, r.KeyID)
		} else {
			fmt.Fprintf(w, "signature: %s (%s): REFUSED, %s: %s\n", r.Ref, cmdutil.Short(r.Digest), r.Reason, r.Detail)
		}
	}
}
