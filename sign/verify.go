package sign

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/layers"
)

// Result is one digest's signature check (warm's report and ready marker,
// host check's signature check).
type Result struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	// Verified: at least one signature names Digest and verifies with a
	// trusted key.
	Verified bool `json:"verified"`
	// KeyID and Format say which key and format verified (sha256 of the
	// key's PKIX DER; bundle or legacy).
	KeyID  string `json:"key_id,omitempty"`
	Format string `json:"format,omitempty"`
	// Artifact is the signature that verified.
	Artifact string `json:"artifact,omitempty"`
	// Reason is set when not verified: missing, wrong-key, tampered,
	// invalid. Detail says more.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Signatures lists every signature artifact found, verified or not.
	Signatures []Found `json:"signatures"`
	// Attestations lists the digest's other referrers (SBOMs,
	// provenance) by artifact type, for host check.
	Attestations []Found `json:"attestations,omitempty"`
}

// Found is one signature (or other referrer) artifact.
type Found struct {
	Format       string `json:"format"`
	Artifact     string `json:"artifact"`
	ArtifactType string `json:"artifact_type,omitempty"`
	Verified     bool   `json:"verified"`
	KeyID        string `json:"key_id,omitempty"`
	Reason       string `json:"reason,omitempty"`
	Detail       string `json:"detail,omitempty"`
}

// Error is a refused verification; errors.As finds it under warm's
// messages.
type Error struct{ Result *Result }

func (e *Error) Error() string {
	r := e.Result
	switch r.Reason {
	case ReasonMissing:
		return fmt.Sprintf("%s (%s): signature missing: %s", r.Ref, r.Digest, r.Detail)
	default:
		return fmt.Sprintf("%s (%s): signature %s: %s", r.Ref, r.Digest, r.Reason, r.Detail)
	}
}

// maxSignatures caps the signature artifacts read per digest.
const maxSignatures = 32

// rank orders refusal reasons: the most telling one is reported.
var rank = map[string]int{ReasonMissing: 0, ReasonInvalid: 1, ReasonWrongKey: 2, ReasonTampered: 3}

// Verify checks the signatures stored for digest d in repo against keys:
// cosign v3 bundles among d's referrers (the referrers API, else the
// referrers tag schema) and the legacy sha256-<hex>.sig tag. refName
// names the image in messages. A registry error (unreachable, denied) is
// returned as an error, not as a refusal.
func Verify(ctx context.Context, refName string, repo name.Repository, d v1.Hash, keys []*PublicKey, lopts ...layers.Option) (*Result, error) {
	if len(keys) == 0 {
		return nil, errNoKeys
	}
	return check(ctx, refName, repo, d, keys, lopts)
}

// List finds d's signatures and other referrers without trusting any key
// (host check without --verify-key): Verified is false, each signature's
// reason is wrong-key.
func List(ctx context.Context, refName string, repo name.Repository, d v1.Hash, lopts ...layers.Option) (*Result, error) {
	return check(ctx, refName, repo, d, nil, lopts)
}

func check(ctx context.Context, refName string, repo name.Repository, d v1.Hash, keys []*PublicKey, lopts []layers.Option) (*Result, error) {
	ropts := layers.RemoteOptions(ctx, lopts...)
	res := &Result{Ref: refName, Digest: d.String(), Signatures: []Found{}}
	keep := func(f Found, v verdict) {
		f.Verified, f.Reason, f.Detail = v.ok, v.reason, v.detail
		if v.key != nil {
			f.KeyID = v.key.ID()
		}
		res.Signatures = append(res.Signatures, f)
		if v.ok && !res.Verified {
			res.Verified, res.KeyID, res.Format, res.Artifact = true, f.KeyID, f.Format, f.Artifact
		}
	}

	idx, err := remote.Referrers(repo.Digest(d.String()), ropts...)
	if err != nil {
		return nil, fmt.Errorf("%s: listing referrers of %s: %w", refName, d, layers.RedactError(err))
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%s: referrers of %s: %v", refName, d, err)
	}
	bundles, attested := 0, 0
	for _, m := range im.Manifests {
		at := m.ArtifactType
		// Registries that list the config media type as the artifact
		// type (older ones, ggcr's) hide a bundle behind the empty
		// config's: look inside those.
		if at != BundleMediaType && at != emptyJSONMediaType && at != "" {
			res.Attestations = append(res.Attestations, Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: at})
			continue
		}
		// A registry listing thousands of referrers does not make kiln
		// fetch thousands of manifests.
		if bundles++; bundles > maxSignatures {
			res.Attestations = append(res.Attestations, Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: at, Detail: "not read: more than " + strconv.Itoa(maxSignatures) + " candidate signatures"})
			continue
		}
		f := Found{Format: FormatBundle, Artifact: m.Digest.String(), ArtifactType: at}
		raw, err := readManifest(repo, m.Digest, ropts)
		if err != nil {
			keep(f, verdict{reason: ReasonInvalid, detail: layers.RedactError(err).Error()})
			continue
		}
		var am artifactManifest
		if err := json.Unmarshal(raw, &am); err != nil || len(am.Layers) == 0 {
			keep(f, verdict{reason: ReasonInvalid, detail: "signature manifest has no bundle layer"})
			continue
		}
		if am.Subject == nil || am.Subject.Digest != d {
			keep(f, verdict{reason: ReasonTampered, detail: "signature manifest's subject is not " + d.String()})
			continue
		}
		if am.ArtifactType != BundleMediaType && (len(am.Layers) != 1 || string(am.Layers[0].MediaType) != BundleMediaType) {
			res.Attestations = append(res.Attestations, Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: am.ArtifactType})
			continue
		}
		var v verdict
		for _, l := range am.Layers {
			if string(l.MediaType) != BundleMediaType {
				continue
			}
			b, err := readBlob(repo, l, ropts)
			if err != nil {
				v = verdict{reason: ReasonInvalid, detail: layers.RedactError(err).Error()}
				continue
			}
			if v = verifyBundle(b, d, keys); v.ok {
				break
			}
		}
		if v.reason == "" && !v.ok {
			v = verdict{reason: ReasonInvalid, detail: "no " + BundleMediaType + " layer"}
		}
		if !v.ok && v.attestation {
			// Signed by a trusted key, but an attestation: listed as
			// one, and no signature.
			res.Attestations = append(res.Attestations, Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: cmp.Or(v.predicate, at), Detail: v.detail})
			attested++
			continue
		}
		keep(f, v)
	}

	tag := repo.Tag(LegacyTag(d))
	desc, err := remote.Get(tag, ropts...)
	switch {
	case err == nil:
		f := Found{Format: FormatLegacy, Artifact: tag.String()}
		var m legacyManifest
		if desc.MediaType.IsIndex() || json.Unmarshal(desc.Manifest, &m) != nil {
			keep(f, verdict{reason: ReasonInvalid, detail: tag.String() + " is not a signature manifest"})
			break
		}
		n := 0
		for _, l := range m.Layers {
			if string(l.MediaType) != SimpleSigningMediaType {
				continue
			}
			n++
			payload, err := readBlob(repo, l, ropts)
			if err != nil {
				keep(f, verdict{reason: ReasonInvalid, detail: layers.RedactError(err).Error()})
				continue
			}
			keep(f, verifySimpleSigning(payload, l.Annotations[SignatureAnnotation], d, keys))
		}
		if n == 0 {
			keep(f, verdict{reason: ReasonInvalid, detail: tag.String() + " has no simple-signing layer"})
		}
	case isNotFound(err):
	default:
		return nil, fmt.Errorf("%s: reading %s: %w", refName, tag, layers.RedactError(err))
	}

	if res.Verified {
		return res, nil
	}
	if len(res.Signatures) == 0 {
		res.Reason = ReasonMissing
		res.Detail = "no cosign bundle among its referrers and no " + LegacyTag(d) + " tag"
		if attested > 0 {
			res.Detail = fmt.Sprintf("no signature: %d signed attestation(s) among its referrers (SBOM, provenance), and an attestation is not a signature; sign the image with kiln sign or cosign sign", attested)
		}
		return res, nil
	}
	best := res.Signatures[0]
	for _, f := range res.Signatures[1:] {
		if rank[f.Reason] > rank[best.Reason] {
			best = f
		}
	}
	res.Reason, res.Detail = best.Reason, best.Detail
	return res, nil
}

// Attestations lists d's referrers that are not signatures (host check).
func Attestations(ctx context.Context, repo name.Repository, d v1.Hash, lopts ...layers.Option) ([]Found, error) {
	idx, err := remote.Referrers(repo.Digest(d.String()), layers.RemoteOptions(ctx, lopts...)...)
	if err != nil {
		return nil, layers.RedactError(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Found
	for _, m := range im.Manifests {
		out = append(out, Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: m.ArtifactType})
	}
	return out, nil
}

var _ error = (*Error)(nil)
