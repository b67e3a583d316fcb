package testdaemon

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// nobody is the user DeniedSocket's callers run as.
const nobody = 65534

// DeniedSocket listens on a Unix socket that the user AsSocketStranger
// runs as may not use (mode 0600, owned by the test's user), in a
// directory everyone may enter, and returns its path.
func DeniedSocket(t testing.TB, name string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, name)
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return p
}

// AsSocketStranger runs fn as a user that may not use DeniedSocket's
// socket: as root, with the effective user nobody for fn's duration (the
// test must not run in parallel with others); as another user, directly
// (the socket is not theirs).
func AsSocketStranger(t testing.TB, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		fn()
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("switching the effective user is tested on Linux")
	}
	if err := syscall.Setresuid(-1, nobody, -1); err != nil {
		t.Skipf("cannot become nobody: %v", err)
	}
	defer func() {
		if err := syscall.Setresuid(-1, 0, -1); err != nil {
			panic("testdaemon: cannot become root again: " + err.Error())
		}
	}()
	fn()
}
