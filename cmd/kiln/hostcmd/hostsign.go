package hostcmd

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/hostcheck"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/sign"
)

// hostSignature reads what host check --image reports about a registry
// image's signatures and attestations. Only a usage mistake (a bad key
// file) is an error; a registry that cannot be asked is reported in the
// item, since host check reports and does not gate on the registry.
func hostSignature(ctx context.Context, ref, key string, lopts []layers.Option) (*hostcheck.Signature, error) {
	r, err := layers.ParseRef(ref, lopts...)
	if err != nil || r.Kind != layers.KindRegistry {
		return nil, nil
	}
	var pol *sign.Policy
	if key != "" {
		if pol, err = sign.LoadPolicy(key); err != nil {
			return nil, cmdutil.UsageErr("--verify-key %v", err)
		}
	}
	s := &hostcheck.Signature{KeyGiven: key != ""}
	ropts := layers.RemoteOptions(ctx, lopts...)
	desc, err := remote.Get(r.Name, ropts...)
	if err != nil {
		s.Err = layers.RedactError(err).Error()
		return s, nil
	}
	repo := r.Name.Context()
	if key != "" {
		s.Result, err = pol.VerifyDigest(ctx, ref, repo, repo, desc.Digest, lopts...)
	} else {
		s.Result, err = sign.List(ctx, ref, repo, desc.Digest, lopts...)
	}
	if err != nil {
		s.Err = layers.RedactError(err).Error()
		return s, nil
	}
	for _, a := range s.Result.Attestations {
		s.Attestations = append(s.Attestations, fmt.Sprintf("referrer %s (%s)", a.ArtifactType, a.Artifact))
	}
	if desc.MediaType.IsIndex() {
		var idx struct {
			Manifests []struct {
				Digest      string            `json:"digest"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if json.Unmarshal(desc.Manifest, &idx) == nil {
			for _, m := range idx.Manifests {
				if !layers.IsAttestation(m.Annotations) {
					continue
				}
				preds := attestationPredicates(ctx, repo.Digest(m.Digest).String(), lopts)
				s.Attestations = append(s.Attestations, fmt.Sprintf("attestation manifest %s for %s: %v", m.Digest, m.Annotations[layers.AnnotationRefDigest], preds))
			}
		}
	}
	return s, nil
}

// attestationPredicates lists the predicate types of an attestation
// manifest's layers (best effort: an unreadable one lists nothing).
func attestationPredicates(ctx context.Context, ref string, lopts []layers.Option) []string {
	r, err := layers.ParseRef(ref, lopts...)
	if err != nil {
		return nil
	}
	desc, err := remote.Get(r.Name, layers.RemoteOptions(ctx, lopts...)...)
	if err != nil {
		return nil
	}
	var m struct {
		Layers []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"layers"`
	}
	if json.Unmarshal(desc.Manifest, &m) != nil {
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
