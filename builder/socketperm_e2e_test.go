package builder

import (
	"context"
	"net"
	"os"
	"path/filepath"
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

// A default socket (none named) that another user owns, or that sits in
// another user's directory, is not used: the build's credentials and
// sources would go to whoever runs that daemon. Named with --builder, it
// is the user's choice.
func TestConnectSkipsAnotherUsersDefaultSocket(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a socket to another user")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "buildkitd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chown(sock, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BUILDKIT_HOST", "")
	old := DefaultSockets
	DefaultSockets = []string{"unix://" + sock}
	t.Cleanup(func() { DefaultSockets = old })
	_, _, err = Connect(context.Background(), "", TLS{})
	if err == nil || !strings.Contains(err.Error(), "belongs to user 12345") || !strings.Contains(err.Error(), "--builder") {
		t.Fatalf("another user's socket: %v", err)
	}
}
