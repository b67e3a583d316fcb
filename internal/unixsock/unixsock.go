// Package unixsock says in words why a daemon's Unix socket cannot be
// used: containerd's, dockerd's and buildkitd's clients report a socket
// kiln may not open as a gRPC or HTTP transport error (`connection error:
// desc = "transport: Error while dialing: dial unix …: connect: permission
// denied"`); Check dials the socket once, first, and names what to do.
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"syscall"
	"time"
)

// Daemon is whose socket it is and how a person gets to use it.
type Daemon struct {
	Name string
	// Fix is what to do when the socket refuses this user.
	Fix string
}

var (
	Containerd = Daemon{"containerd", "run kiln as root (sudo), or give your group the socket (gid in [grpc] of /etc/containerd/config.toml)"}
	Docker     = Daemon{"dockerd", "add your user to the docker group (sudo usermod -aG docker $USER, then log in again) or run kiln as root; rootless Docker listens on $XDG_RUNTIME_DIR/docker.sock"}
	BuildKit   = Daemon{"buildkitd", "run kiln as root (sudo), or point --builder / $BUILDKIT_HOST at a buildkitd you may use (rootless: unix://$XDG_RUNTIME_DIR/buildkit/buildkitd.sock)"}
)

// Check dials path once. It returns nil when the socket accepts the
// connection (or fails in a way the daemon's client reports better), and
// an error in words when this user may not use it or nothing listens.
// The error does not repeat path: the caller names the target.
func Check(ctx context.Context, path string, d Daemon) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", path)
	if err == nil {
		c.Close()
		return nil
	}
	return Explain(err, d)
}

// Explain words a dial error of d's socket; other errors come back as they
// are (nil stays nil).
func Explain(err error, d Daemon) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &permError{fmt.Sprintf("permission denied on %s's socket: %s", d.Name, d.Fix)}
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing listens on the socket (a stale socket: is %s running?)", d.Name)
	}
	return err
}

// permError is a socket this user may not use: errors.Is(err,
// fs.ErrPermission) holds.
type permError struct{ msg string }

func (e *permError) Error() string        { return e.msg }
func (e *permError) Is(target error) bool { return target == fs.ErrPermission }
