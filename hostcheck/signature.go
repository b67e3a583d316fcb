package hostcheck

import (
	"fmt"
)

// signature is the "signature" item: pass when the image verifies with
// --verify-key, fail when it does not, warn when no key was given
// (signatures found are listed, not trusted) or the image is unsigned.
func (c *checker) signature() Item {
	it := item("signature", "image signature and attestations")
	s := c.o.Signature
	if c.im == nil || s == nil {
		return skip(it, "no registry image to check (--image REF names a registry image)")
	}
	for _, a := range s.Attestations {
		it.Evidence = append(it.Evidence, "attestation: "+a)
	}
	if s.Err != "" {
		it.Status, it.Summary = Warn, "could not read the image's signatures: "+s.Err
		return it
	}
	r := s.Result
	for _, f := range r.Signatures {
		e := fmt.Sprintf("signature (%s) %s", f.Format, f.Artifact)
		if s.KeyGiven {
			if f.Verified {
				e += ": verified with key " + f.KeyID
			} else {
				e += ": " + f.Reason + ": " + f.Detail
			}
		}
		it.Evidence = append(it.Evidence, e)
	}
	switch {
	case s.KeyGiven && r.Verified:
		it.Status, it.Summary = Pass, fmt.Sprintf("%s is signed by trusted key %s (%s)", r.Digest, r.KeyID, r.Format)
	case s.KeyGiven:
		it.Status, it.Summary = Fail, fmt.Sprintf("%s: signature %s: %s", r.Digest, r.Reason, r.Detail)
		it.Fix = []string{"sign the image: kiln sign " + r.Ref + " --key KEY (or cosign sign --key)", "or warm an image this key signed"}
	case len(r.Signatures) > 0:
		it.Status, it.Summary = Warn, fmt.Sprintf("%d signature(s) stored, none checked: pass --verify-key PUBKEY to verify", len(r.Signatures)+r.SignaturesOmitted)
	default:
		it.Status, it.Summary = Warn, "unsigned: no cosign signature stored for "+r.Digest
		it.Fix = []string{"kiln sign " + r.Ref + " --key KEY"}
	}
	return it
}
