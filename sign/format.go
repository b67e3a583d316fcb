package sign

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Media and predicate types of cosign's formats.
const (
	// BundleMediaType is the Sigstore bundle v0.3 (the artifact type and
	// layer media type of cosign v3's signature referrer).
	BundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// CosignSignPredicate is the predicate type of the in-toto statement
	// cosign v3 signs for `cosign sign`.
	CosignSignPredicate = "https://sigstore.dev/cosign/sign/v1"
	// SimpleSigningMediaType is the legacy .sig layer's media type.
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// SignatureAnnotation holds the legacy layer's base64 signature.
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
	// BundlePredicateAnnotation is the referrer annotation cosign sets.
	BundlePredicateAnnotation = "dev.sigstore.bundle.predicateType"

	inTotoPayloadType = "application/vnd.in-toto+json"
	inTotoStatementV1 = "https://in-toto.io/Statement/v1"
	simpleSigningType = "cosign container image signature"
)

// Why a signature was refused. Stable strings: reports and tests use them.
const (
	ReasonMissing  = "missing"   // no signature stored for the digest
	ReasonWrongKey = "wrong-key" // signed, but by a key not trusted here
	ReasonTampered = "tampered"  // does not verify with the key it names, or names another digest
	ReasonInvalid  = "invalid"   // unreadable signature artifact
)

// bundle is the subset of the Sigstore bundle v0.3 JSON kiln writes and
// reads (protojson field names).
type bundle struct {
	MediaType            string `json:"mediaType"`
	VerificationMaterial struct {
		PublicKey *struct {
			Hint string `json:"hint"`
		} `json:"publicKey,omitempty"`
		Certificate               json.RawMessage `json:"certificate,omitempty"`
		TlogEntries               []any           `json:"tlogEntries"`
		TimestampVerificationData json.RawMessage `json:"timestampVerificationData,omitempty"`
	} `json:"verificationMaterial"`
	DSSEEnvelope *dsseEnvelope   `json:"dsseEnvelope,omitempty"`
	MessageSig   json.RawMessage `json:"messageSignature,omitempty"`
}

type dsseEnvelope struct {
	Payload     string `json:"payload"`
	PayloadType string `json:"payloadType"`
	Signatures  []struct {
		Sig   string `json:"sig"`
		KeyID string `json:"keyid,omitempty"`
	} `json:"signatures"`
}

type statement struct {
	Type          string          `json:"_type"`
	Subject       []subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

type subject struct {
	Name   string            `json:"name,omitempty"`
	Digest map[string]string `json:"digest"`
}

// pae is DSSE's pre-authentication encoding: what the signature covers.
func pae(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return b.Bytes()
}

// newBundle signs digest as cosign v3 does for `cosign sign --key`.
func newBundle(s *Signer, digest v1.Hash) ([]byte, error) {
	return newStatementBundle(s, digest, CosignSignPredicate, json.RawMessage("{}"))
}

// newStatementBundle signs an in-toto statement about digest with the
// given predicate: a signature (CosignSignPredicate) or, as `cosign
// attest` writes them, an attestation (an SBOM, provenance).
func newStatementBundle(s *Signer, digest v1.Hash, predicateType string, predicate json.RawMessage) ([]byte, error) {
	st := statement{
		Type:          inTotoStatementV1,
		Subject:       []subject{{Digest: map[string]string{digest.Algorithm: digest.Hex}}},
		PredicateType: predicateType,
		Predicate:     predicate,
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	sig, err := s.sign(pae(inTotoPayloadType, payload))
	if err != nil {
		return nil, fmt.Errorf("signing: %v", err)
	}
	var b bundle
	b.MediaType = BundleMediaType
	b.VerificationMaterial.PublicKey = &struct {
		Hint string `json:"hint"`
	}{s.Public().Hint()}
	b.VerificationMaterial.TlogEntries = []any{}
	b.DSSEEnvelope = &dsseEnvelope{
		Payload:     base64.StdEncoding.EncodeToString(payload),
		PayloadType: inTotoPayloadType,
	}
	b.DSSEEnvelope.Signatures = append(b.DSSEEnvelope.Signatures, struct {
		Sig   string `json:"sig"`
		KeyID string `json:"keyid,omitempty"`
	}{Sig: base64.StdEncoding.EncodeToString(sig)})
	return json.Marshal(b)
}

// verdict is one signature artifact checked against the trusted keys.
type verdict struct {
	ok     bool
	key    *PublicKey
	reason string
	detail string
	// attestation marks a validly signed statement that is not a
	// signature (an SBOM, provenance; predicate its type): listed among
	// the attestations, never counted as a signature.
	attestation bool
	predicate   string
}

// verifyBundle checks a bundle's DSSE signature with keys and that its
// statement names digest.
func verifyBundle(raw []byte, digest v1.Hash, keys []*PublicKey) verdict {
	var b bundle
	if err := json.Unmarshal(raw, &b); err != nil {
		return verdict{reason: ReasonInvalid, detail: "bundle does not parse: " + err.Error()}
	}
	if !strings.HasPrefix(b.MediaType, "application/vnd.dev.sigstore.bundle") {
		return verdict{reason: ReasonInvalid, detail: fmt.Sprintf("bundle mediaType %q", b.MediaType)}
	}
	if b.DSSEEnvelope == nil {
		return verdict{reason: ReasonInvalid, detail: "bundle has no DSSE envelope (a message signature is not an image signature)"}
	}
	env := b.DSSEEnvelope
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return verdict{reason: ReasonInvalid, detail: "DSSE payload is not base64"}
	}
	if b.VerificationMaterial.PublicKey == nil {
		return verdict{reason: ReasonWrongKey, detail: "bundle carries a certificate (keyless signature), not a key: keyless verification is not available offline"}
	}
	hint := b.VerificationMaterial.PublicKey.Hint
	signed := pae(env.PayloadType, payload)
	var named *PublicKey
	for _, k := range keys {
		if hint != "" && k.Hint() == hint {
			named = k
		}
		for _, s := range env.Signatures {
			sig, err := base64.StdEncoding.DecodeString(s.Sig)
			if err != nil || !k.verify(signed, sig) {
				continue
			}
			if env.PayloadType != inTotoPayloadType {
				return verdict{reason: ReasonTampered, key: k, detail: fmt.Sprintf("DSSE payload type %q, want %s", env.PayloadType, inTotoPayloadType)}
			}
			var st statement
			if err := json.Unmarshal(payload, &st); err != nil {
				return verdict{reason: ReasonInvalid, key: k, detail: "statement does not parse: " + err.Error()}
			}
			// A trusted key also signs attestations (SBOMs, provenance):
			// those say what an image is, not that it is approved. Only
			// cosign's signature predicate counts as a signature.
			if st.Type != inTotoStatementV1 || st.PredicateType != CosignSignPredicate {
				return verdict{reason: ReasonInvalid, key: k, attestation: true, predicate: st.PredicateType,
					detail: fmt.Sprintf("an attestation (statement %q, predicate %q), not a signature: only %s signs an image", st.Type, st.PredicateType, CosignSignPredicate)}
			}
			for _, sub := range st.Subject {
				if sub.Digest[digest.Algorithm] == digest.Hex {
					return verdict{ok: true, key: k}
				}
			}
			return verdict{reason: ReasonTampered, key: k, detail: "the signed statement names another digest than " + digest.String()}
		}
	}
	if named != nil {
		return verdict{reason: ReasonTampered, key: named, detail: "signature by key " + named.ID() + " does not verify: the bundle was altered"}
	}
	if hint != "" {
		return verdict{reason: ReasonWrongKey, detail: "signed by key " + hintID(hint) + ", not one of the trusted keys"}
	}
	return verdict{reason: ReasonWrongKey, detail: "does not verify with any trusted key (another key, or altered)"}
}

// simpleSigning is cosign's legacy payload.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// newSimpleSigning is the legacy payload for digest in repo.
func newSimpleSigning(repo string, digest v1.Hash) ([]byte, error) {
	var p simpleSigning
	p.Critical.Identity.DockerReference = repo
	p.Critical.Image.DockerManifestDigest = digest.String()
	p.Critical.Type = simpleSigningType
	return json.Marshal(p)
}

// verifySimpleSigning checks a legacy payload and its base64 signature.
func verifySimpleSigning(payload []byte, sigB64 string, digest v1.Hash, keys []*PublicKey) verdict {
	sig, err := base64.StdEncoding.DecodeString(sigB64)
	if err != nil || len(sig) == 0 {
		return verdict{reason: ReasonInvalid, detail: "the " + SignatureAnnotation + " annotation is not base64"}
	}
	for _, k := range keys {
		if !k.verify(payload, sig) {
			continue
		}
		var p simpleSigning
		if err := json.Unmarshal(payload, &p); err != nil {
			return verdict{reason: ReasonInvalid, key: k, detail: "simple-signing payload does not parse: " + err.Error()}
		}
		if p.Critical.Type != simpleSigningType {
			return verdict{reason: ReasonTampered, key: k, detail: fmt.Sprintf("payload type %q", p.Critical.Type)}
		}
		if p.Critical.Image.DockerManifestDigest != digest.String() {
			return verdict{reason: ReasonTampered, key: k, detail: "the signed payload names " + p.Critical.Image.DockerManifestDigest + ", not " + digest.String()}
		}
		return verdict{ok: true, key: k}
	}
	return verdict{reason: ReasonWrongKey, detail: "does not verify with any trusted key (another key, or altered)"}
}

var errNoKeys = errors.New("no public keys to verify with")

// hintID is a bundle's key hint (cosign's: base64 of the SHA-256 of the
// key's PKIX DER) as kiln names keys everywhere else, PublicKey.ID's
// sha256:HEX of the same hash; a hint of another shape is said as it is.
func hintID(hint string) string {
	b, err := base64.StdEncoding.DecodeString(hint)
	if err != nil || len(b) != sha256.Size {
		return "with hint " + hint
	}
	return fmt.Sprintf("sha256:%x", b)
}
