package sign

import (
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
