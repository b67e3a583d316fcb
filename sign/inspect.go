package sign

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// Inspection is what a registry says about an image's signatures and
// attestations (kiln host check --image reports it; sign.Inspection).
type Inspection struct {
	// KeyGiven: a policy was given, so Result is a verification.
	KeyGiven bool
	// Result is the verification (KeyGiven), or the signatures found
	// checked against no key (only their number and formats mean
	// anything then).
	Result *Result
	// Attestations are the image's attestations: BuildKit-style
	// attestation manifests in its index and non-signature referrers,
	// as "predicate-or-artifact-type (digest)".
	Attestations []string
	// Err is why the registry could not be asked.
	Err string
}

// Inspect reads what the registry holds about ref's signatures and
// attestations: verified under pol, or only listed when pol is nil. It
// reports and does not gate: a registry that cannot be asked is the
// Inspection's Err, not an error. A ref that is not a registry reference
// has nothing to inspect (nil).
func Inspect(ctx context.Context, ref string, pol *Policy, lopts ...registry.Option) *Inspection {
	r, err := layers.ParseRef(ref, lopts...)
	if err != nil || r.Kind != layers.KindRegistry {
		return nil
	}
	s := &Inspection{KeyGiven: pol != nil}
	lopts = registry.Pooled(lopts) // the resolve and the verification: one login
	c, err := registry.ClientFor(ctx, r.Name.Context(), lopts...)
	if err != nil {
		s.Err = registry.RedactError(err).Error()
		return s
	}
	desc, raw, err := resolve(ctx, c, r.Name)
	if err != nil {
		s.Err = registry.RedactError(err).Error()
		return s
	}
	repo := r.Name.Context()
	if pol != nil {
		s.Result, err = pol.VerifyDigest(ctx, ref, repo, repo, desc.Digest, lopts...)
	} else {
		s.Result, err = List(ctx, ref, repo, desc.Digest, lopts...)
	}
	if err != nil {
		s.Err = registry.RedactError(err).Error()
		return s
	}
	for _, a := range s.Result.Attestations {
		s.Attestations = append(s.Attestations, fmt.Sprintf("referrer %s (%s)", a.ArtifactType, a.Artifact))
	}
	if !desc.MediaType.IsIndex() {
		return s
	}
	var idx struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if json.Unmarshal(raw, &idx) != nil {
		return s
	}
	for _, m := range idx.Manifests {
		if !layers.IsAttestation(m.Annotations) {
			continue
		}
		preds := attestationPredicates(ctx, c, m.Digest)
		s.Attestations = append(s.Attestations, fmt.Sprintf("attestation manifest %s for %s: %v", m.Digest, m.Annotations[layers.AnnotationRefDigest], preds))
	}
	return s
}

// attestationPredicates lists the predicate types of the attestation
// manifest dg in c's repository (best effort: an unreadable one lists
// nothing).
func attestationPredicates(ctx context.Context, c *registry.Client, dg string) []string {
	h, err := v1.NewHash(dg)
	if err != nil {
		return nil
	}
	raw, err := readManifest(ctx, c, h)
	if err != nil {
		return nil
	}
	var m struct {
		Layers []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"layers"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	out := []string{}
	for _, l := range m.Layers {
		if p := l.Annotations[layers.AnnotationPredicateType]; p != "" {
			out = append(out, p)
		}
	}
	return out
}
