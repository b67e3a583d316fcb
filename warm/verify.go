package warm

import (
	"context"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sign"
)

// The signature gate of kiln warm --verify-key runs after the warm set is
// resolved (indexes, manifests and configs read and verified by digest)
// and before the first layer or weight blob is fetched, so a host never
// holds, let alone marks ready, bytes no trusted key signed.

// VerifySignatures checks every image of set (the digest its reference
// resolved to: what cosign signs) and every weights artifact of vols
// against pol. It returns the results and, when one does not verify or
// cannot carry a signature, an *UnverifiedError that names it and why.
func VerifySignatures(ctx context.Context, pol *sign.Policy, set *Set, vols []*Volume, lopts []registry.Option) ([]*sign.Result, error) {
	path := pol.Source
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
			return unverified(fmt.Errorf("--verify-key: %s is not in a registry: it carries no signature to verify", refName))
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
		// A variant (REPO:TAG-zstd) stands in for the image as named only
		// when it has the named image's config and, as it is warmed, that
		// config's layer contents: the signature checked is the named
		// image's, so an unsigned variant of a signed tag is still warmed
		// (or set aside for the tag), never a reason to refuse the tag.
		target, source := img.Target, img.Source
		if img.Named != nil {
			target, source = *img.Named, img.Name
		}
		d, err := v1.NewHash(target.Digest.String())
		if err != nil {
			return out, err
		}
		// The signature is read as the image was: through the
		// registry's mirrors first (registry.WithMirrors in lopts).
		if err := check(img.Name, source, d, ""); err != nil {
			return out, err
		}
	}
	for _, v := range vols {
		if v.Resolved.Ref == "" {
			return out, unverified(fmt.Errorf("--verify-key: weights %s is a manifest file, not a registry artifact: it carries no signature to verify", v.Ref))
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
		return out, unverified(fmt.Errorf("--verify-key %s: refused before fetching any layer: %s", path, msg))
	}
	return out, nil
}

// UnverifiedError is VerifySignatures' refusal: an image or weights
// artifact no trusted key signed (kiln warm exits 4).
type UnverifiedError struct{ Err error }

func (e *UnverifiedError) Error() string { return e.Err.Error() }
func (e *UnverifiedError) Unwrap() error { return e.Err }

func unverified(err error) error { return &UnverifiedError{Err: err} }
