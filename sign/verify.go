package sign

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/registry"
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
	// At most maxListed signatures and attestations are listed (a
	// report and warm's ready marker stay small whatever a registry
	// lists); these count the rest, and the candidate signatures not
	// read (past maxSignatures, readBudget or readTime, or after one
	// verified).
	SignaturesOmitted   int `json:"signatures_omitted,omitempty"`
	AttestationsOmitted int `json:"attestations_omitted,omitempty"`
	Unread              int `json:"unread,omitempty"`
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

// What one digest's check reads and keeps. A registry can list any
// number of referrers, and anyone who can push can add bundle-typed junk:
// candidates are read most likely first (see candidates) up to
// maxSignatures manifests, readBudget bytes and readTime, which no real
// signature set comes near, and at most maxListed of each kind are kept in the
// Result.
const (
	maxSignatures = 256
	readBudget    = 64 << 20
	readTime      = 2 * time.Minute
	maxListed     = 32
)

// rank orders refusal reasons: the most telling one is reported.
var rank = map[string]int{ReasonMissing: 0, ReasonInvalid: 1, ReasonWrongKey: 2, ReasonTampered: 3}

// Verify checks the signatures stored for digest d in repo against keys:
// cosign v3 bundles among d's referrers (the referrers API, else the
// referrers tag schema) and the legacy sha256-<hex>.sig tag. refName
// names the image in messages. A registry error (unreachable, denied) is
// returned as an error, not as a refusal.
func Verify(ctx context.Context, refName string, repo name.Repository, d v1.Hash, keys []*PublicKey, lopts ...registry.Option) (*Result, error) {
	if len(keys) == 0 {
		return nil, errNoKeys
	}
	return check(ctx, refName, repo, d, keys, lopts)
}

// List finds d's signatures and other referrers without trusting any key
// (host check without --verify-key): Verified is false, each signature's
// reason is wrong-key.
func List(ctx context.Context, refName string, repo name.Repository, d v1.Hash, lopts ...registry.Option) (*Result, error) {
	return check(ctx, refName, repo, d, nil, lopts)
}

func check(ctx context.Context, refName string, repo name.Repository, d v1.Hash, keys []*PublicKey, lopts []registry.Option) (*Result, error) {
	// One client reads it all: the caller's pool's (registry.WithPool),
	// the image's, else its own; one login to the repository.
	c, err := registry.ClientFor(ctx, repo, lopts...)
	if err != nil {
		return nil, fmt.Errorf("%s: listing referrers of %s: %w", refName, d, registry.RedactError(err))
	}
	res := &Result{Ref: refName, Digest: d.String(), Signatures: []Found{}}
	var best *Found // the most telling refusal (rank)
	keep := func(f Found, v verdict) {
		f.Verified, f.Reason, f.Detail = v.ok, v.reason, v.detail
		if v.key != nil {
			f.KeyID = v.key.ID()
		}
		if v.ok && !res.Verified {
			res.Verified, res.KeyID, res.Format, res.Artifact = true, f.KeyID, f.Format, f.Artifact
		}
		if !v.ok && (best == nil || rank[f.Reason] > rank[best.Reason]) {
			best = &f
		}
		if len(res.Signatures) < maxListed || v.ok && !hasVerified(res.Signatures) {
			res.Signatures = append(res.Signatures, f)
			return
		}
		res.SignaturesOmitted++
	}
	attest := func(f Found) {
		if len(res.Attestations) < maxListed {
			res.Attestations = append(res.Attestations, f)
			return
		}
		res.AttestationsOmitted++
	}

	im, err := c.Referrers(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("%s: listing referrers of %s: %w", refName, d, registry.RedactError(err))
	}
	var cands []v1.Descriptor
	for _, m := range im.Manifests {
		at := m.ArtifactType
		// Registries that list the config media type as the artifact
		// type (older ones, ggcr's) hide a bundle behind the empty
		// config's: look inside those.
		if at != BundleMediaType && at != emptyJSONMediaType && at != "" {
			attest(Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: at})
			continue
		}
		cands = append(cands, m)
	}
	attested, read, budget, until := 0, 0, int64(readBudget), time.Now().Add(readTime)
	for i, m := range candidates(cands) {
		// Read until one verifies, within bounds: thousands of junk
		// referrers do not make kiln fetch thousands of manifests.
		if res.Verified || read == maxSignatures || budget <= 0 || time.Now().After(until) {
			res.Unread = len(cands) - i
			break
		}
		read++
		at := m.ArtifactType
		f := Found{Format: FormatBundle, Artifact: m.Digest.String(), ArtifactType: at}
		raw, err := readManifest(ctx, c, m.Digest)
		if err != nil {
			keep(f, verdict{reason: ReasonInvalid, detail: registry.RedactError(err).Error()})
			continue
		}
		budget -= int64(len(raw))
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
			attest(Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: am.ArtifactType})
			continue
		}
		var v verdict
		for _, l := range am.Layers {
			if string(l.MediaType) != BundleMediaType {
				continue
			}
			if budget -= l.Size; budget < 0 {
				v = verdict{reason: ReasonInvalid, detail: "not read: the signatures read before it used the read budget"}
				break
			}
			b, err := readBlob(ctx, c, l)
			if err != nil {
				v = verdict{reason: ReasonInvalid, detail: registry.RedactError(err).Error()}
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
			attest(Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: cmp.Or(v.predicate, at), Detail: v.detail})
			attested++
			continue
		}
		keep(f, v)
	}

	tag := repo.Tag(LegacyTag(d))
	raw, desc, err := c.Manifest(ctx, tag)
	switch {
	case err == nil:
		f := Found{Format: FormatLegacy, Artifact: tag.String()}
		var m legacyManifest
		if desc.MediaType.IsIndex() || json.Unmarshal(raw, &m) != nil {
			keep(f, verdict{reason: ReasonInvalid, detail: tag.String() + " is not a signature manifest"})
			break
		}
		n := 0
		for i, l := range m.Layers {
			if string(l.MediaType) != SimpleSigningMediaType {
				continue
			}
			if n++; n > maxSignatures || res.Verified {
				res.Unread += len(m.Layers) - i
				break
			}
			payload, err := readBlob(ctx, c, l)
			if err != nil {
				keep(f, verdict{reason: ReasonInvalid, detail: registry.RedactError(err).Error()})
				continue
			}
			keep(f, verifySimpleSigning(payload, l.Annotations[SignatureAnnotation], d, keys))
		}
		if n == 0 {
			keep(f, verdict{reason: ReasonInvalid, detail: tag.String() + " has no simple-signing layer"})
		}
	case registry.IsNotFound(err):
	default:
		return nil, fmt.Errorf("%s: reading %s: %w", refName, tag, registry.RedactError(err))
	}

	if res.Verified {
		return res, nil
	}
	if best == nil {
		res.Reason = ReasonMissing
		res.Detail = "no cosign bundle among its referrers and no " + LegacyTag(d) + " tag"
		if attested > 0 {
			res.Detail = fmt.Sprintf("no signature: %d signed attestation(s) among its referrers (SBOM, provenance), and an attestation is not a signature; sign the image with kiln sign or cosign sign", attested)
		}
		return res, nil
	}
	res.Reason, res.Detail = best.Reason, best.Detail
	if res.Unread > 0 {
		res.Detail += fmt.Sprintf(" (%d more candidate signature(s) not read: over %d, %s or %s)", res.Unread, maxSignatures, bytesize.Format(readBudget), readTime)
	}
	return res, nil
}

func hasVerified(fs []Found) bool {
	for _, f := range fs {
		if f.Verified {
			return true
		}
	}
	return false
}

// candidates orders bundle-typed referrers most likely first: those
// whose dev.sigstore.bundle.predicateType annotation is cosign's
// signature predicate (kiln and cosign set it), then the newest by
// org.opencontainers.image.created; listing order breaks ties. Junk
// listed first does not push a real signature past the read bounds.
func candidates(ms []v1.Descriptor) []v1.Descriptor {
	created := func(m v1.Descriptor) time.Time {
		t, _ := time.Parse(time.RFC3339, m.Annotations["org.opencontainers.image.created"])
		return t
	}
	slices.SortStableFunc(ms, func(a, b v1.Descriptor) int {
		pa, pb := a.Annotations[BundlePredicateAnnotation] == CosignSignPredicate, b.Annotations[BundlePredicateAnnotation] == CosignSignPredicate
		if pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return created(b).Compare(created(a))
	})
	return ms
}

// Attestations lists d's referrers that are not signatures (host check).
func Attestations(ctx context.Context, repo name.Repository, d v1.Hash, lopts ...registry.Option) ([]Found, error) {
	c, err := registry.ClientFor(ctx, repo, lopts...)
	if err != nil {
		return nil, registry.RedactError(err)
	}
	im, err := c.Referrers(ctx, d)
	if err != nil {
		return nil, registry.RedactError(err)
	}
	var out []Found
	for _, m := range im.Manifests {
		out = append(out, Found{Format: "referrer", Artifact: m.Digest.String(), ArtifactType: m.ArtifactType})
	}
	return out, nil
}

var _ error = (*Error)(nil)
