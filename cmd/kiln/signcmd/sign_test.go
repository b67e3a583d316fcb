package signcmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
)

// kiln sign and kiln verify on an image in a registry with the referrers
// API: usage errors, a signature made and verified, a wrong key refused.
func TestSignVerifyCommands(t *testing.T) {
	ref, d := testimage.ReferrersRegistry(t)
	dir := t.TempDir()
	ks := cmdtest.NewKeys(t)
	key, pub, otherPub := ks.Key, ks.Pub, ks.OtherPub

	// Usage errors: exit 2, and with --json one object naming the error.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sign", ref, "--json"}, "--key is required"},
		{[]string{"sign", ref, "--key", pub, "--json"}, "not a private key"},
		{[]string{"sign", ref, "--key", key, "--format", "x", "--json"}, "--format"},
		{[]string{"sign", "oci:" + dir, "--key", key, "--json"}, "not a registry reference"},
		{[]string{"verify", ref, "--json"}, "--key is required"},
		{[]string{"verify", ref, "--key", key, "--json"}, "PUBLIC KEY"},
	} {
		code, out, _ := run(t, tc.args...)
		var rep struct{ Schema, Error string }
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != cmdutil.ExitUsage || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%v: exit %d, %v %q, want 2 and %q", tc.args, code, err, out, tc.want)
		}
		if strings.Contains(out, "PRIVATE KEY-----") {
			t.Errorf("%v: key material in output", tc.args)
		}
	}
	// Missing, then signed, then the wrong key: exit 4 with reasons.
	code, out, _ := run(t, "verify", ref, "--key", pub, "--json")
	if code != cmdutil.ExitUnverified || !strings.Contains(out, `"reason": "missing"`) {
		t.Fatalf("unsigned: exit %d\n%s", code, out)
	}
	code, out, errOut := run(t, "sign", ref, "--key", key, "--json")
	var sr signReport
	if json.Unmarshal([]byte(out), &sr); code != 0 || sr.Signed == nil || sr.Signed.Digest != d.String() || sr.Signed.Referrers != "api" {
		t.Fatalf("sign: exit %d %s %s", code, out, errOut)
	}
	if code, out, _ = run(t, "verify", ref, "--key", pub); code != 0 || !strings.Contains(out, "verified (bundle") {
		t.Fatalf("verify: exit %d %s", code, out)
	}
	code, out, errOut = run(t, "verify", ref, "--key", otherPub, "--json")
	if code != cmdutil.ExitUnverified || !strings.Contains(out, `"reason": "wrong-key"`) || !strings.Contains(errOut, ref) {
		t.Fatalf("wrong key: exit %d\n%s\n%s", code, out, errOut)
	}
}
