package hostcheck

import (
	"strings"
	"testing"

	"github.com/kiln-build/kiln/sign"
)

func TestSignatureItem(t *testing.T) {
	dg := "sha256:" + strings.Repeat("a", 64)
	bundle := sign.Found{Format: sign.FormatBundle, Artifact: "sha256:" + strings.Repeat("b", 64)}
	ok := bundle
	ok.Verified, ok.KeyID = true, "sha256:k"
	bad := bundle
	bad.Reason, bad.Detail = sign.ReasonTampered, "altered"
	for _, tc := range []struct {
		name    string
		sig     *sign.Inspection
		status  Status
		summary string
	}{
		{"no registry image", nil, Skip, "no registry image"},
		{"registry unreachable", &sign.Inspection{Err: "dial tcp: refused"}, Warn, "could not read"},
		{"unsigned, no key", &sign.Inspection{Result: &sign.Result{Ref: "r", Digest: dg}}, Warn, "unsigned"},
		{"signed, no key", &sign.Inspection{Result: &sign.Result{Ref: "r", Digest: dg, Signatures: []sign.Found{bundle}}}, Warn, "none checked"},
		{"verified", &sign.Inspection{KeyGiven: true, Result: &sign.Result{Ref: "r", Digest: dg, Verified: true, KeyID: "sha256:k", Format: sign.FormatBundle, Signatures: []sign.Found{ok}}}, Pass, "trusted key sha256:k"},
		{"tampered", &sign.Inspection{KeyGiven: true, Result: &sign.Result{Ref: "r", Digest: dg, Reason: sign.ReasonTampered, Detail: "altered", Signatures: []sign.Found{bad}}}, Fail, "signature tampered"},
		{"missing with key", &sign.Inspection{KeyGiven: true, Result: &sign.Result{Ref: "r", Digest: dg, Reason: sign.ReasonMissing, Detail: "none"}}, Fail, "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &checker{im: &Image{Ref: "r"}, o: Options{Signature: tc.sig}}
			it := c.signature()
			if it.Status != tc.status || !strings.Contains(it.Summary, tc.summary) {
				t.Fatalf("%s: %q, want %s containing %q", it.Status, it.Summary, tc.status, tc.summary)
			}
		})
	}
	// The item is only there when asked for.
	r := Check(&Host{}, &Image{Ref: "r"}, Options{})
	if r.Item("signature") != nil {
		t.Fatal("signature item without Options.Signature")
	}
	r = Check(&Host{}, &Image{Ref: "r"}, Options{Signature: &sign.Inspection{KeyGiven: true, Result: &sign.Result{Ref: "r", Digest: dg, Reason: sign.ReasonMissing}}})
	if it := r.Item("signature"); it == nil || it.Status != Fail || r.OK {
		t.Fatalf("signature item in the report: %+v ok=%v", it, r.OK)
	}
}
