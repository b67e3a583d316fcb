package sign

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// D4: a key, --verify-key or policy path pointing at /dev/zero grew kiln
// to 23 GB until the OOM killer came; a FIFO there blocked for ever, deaf
// to SIGINT. Both are refused at once, by name.
func TestKeysAndPoliciesRefuseDevicesAndFIFOs(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "cosign.pub")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/dev/zero", fifo} {
		if _, err := LoadPublicKey(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("LoadPublicKey(%s): %v", p, err)
		}
		if _, err := LoadSigner(p, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("LoadSigner(%s): %v", p, err)
		}
		if _, err := LoadPolicy(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("LoadPolicy(%s): %v", p, err)
		}
	}
}

// Issue 27 (minor): a policy whose comment holds "-----BEGIN " was taken
// for a PEM key, and unknown policy keys were ignored (a misspelt "keys"
// trusted less than its author meant, silently).
func TestPolicyCommentsAndUnknownFields(t *testing.T) {
	dir := t.TempDir()
	k, _ := GenerateSigner()
	pub := k.Public().PEM()
	os.WriteFile(filepath.Join(dir, "fleet.pub"), pub, 0o600)
	good := filepath.Join(dir, "policy.yaml")
	os.WriteFile(good, []byte("# paste keys as files, not as -----BEGIN PUBLIC KEY----- blocks\nschema: kiln.verify-policy/v1\nkeys:\n  - scope: \"*\"\n    key: fleet.pub\n"), 0o600)
	if p, err := LoadPolicy(good); err != nil || len(p.rules) != 1 {
		t.Fatalf("policy with a PEM word in a comment: %v", err)
	}
	bad := filepath.Join(dir, "typo.yaml")
	os.WriteFile(bad, []byte("schema: kiln.verify-policy/v1\nkeys:\n  - scope: \"*\"\n    key: fleet.pub\n    scopes: 127.0.0.1:5000/acme\n"), 0o600)
	if _, err := LoadPolicy(bad); err == nil || !strings.Contains(err.Error(), "scopes") {
		t.Fatalf("unknown field: %v", err)
	}
	// A key file itself still loads.
	if _, err := LoadPolicy(filepath.Join(dir, "fleet.pub")); err != nil {
		t.Fatal(err)
	}
}
