package builder

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
)

// Issue 25 item 6: a buildkitd socket this user may not use says what to
// do (root, --builder / $BUILDKIT_HOST), not a gRPC transport error.
func TestConnectSocketPermissionInWords(t *testing.T) {
	sock := testdaemon.DeniedSocket(t, "buildkitd.sock")
	t.Setenv("BUILDKIT_HOST", "")
	var err error
	testdaemon.AsSocketStranger(t, func() {
		var c interface{ Close() error }
		c, _, err = Connect(context.Background(), "unix://"+sock, TLS{})
		if err == nil {
			c.Close()
		}
	})
	if err == nil {
		t.Fatal("connected to a socket this user may not use")
	}
	for _, w := range []string{"unix://" + sock, "permission denied on buildkitd's socket", "run kiln as root", "--builder"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	if strings.Contains(err.Error(), "rpc error") || strings.Contains(err.Error(), "dial unix") {
		t.Errorf("error shows the transport: %v", err)
	}
}
