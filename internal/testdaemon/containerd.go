package testdaemon

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Containerd is a running containerd.
type Containerd struct {
	Socket string // gRPC API socket
	Root   string // content and snapshots
	State  string
}

// StartContainerd starts containerd with its own root, state, socket and
// config (CRI and the snapshotters that need special filesystems
// disabled), and waits until it answers on the socket.
func StartContainerd(t testing.TB, opts ...Option) *Containerd {
	t.Helper()
	c := newConfig("KILN_REQUIRE_CONTAINERD", opts)
	bin := c.lookup(t, "containerd")
	dir := t.TempDir()
	short := shortDir(t, "kcd")
	cd := &Containerd{Socket: c.socket, Root: filepath.Join(dir, "root"), State: filepath.Join(short, "state")}
	if cd.Socket == "" {
		cd.Socket = filepath.Join(short, "c.sock")
	} else if err := os.MkdirAll(filepath.Dir(cd.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, cd.Root, cd.State, cd.Socket, cd.Socket+".ttrpc")
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := c.start(t, bin, dir, 15*time.Second, []string{cd.Root}, "--config", cfg)
	p.wait(t, 20*time.Second, "open "+cd.Socket, func() bool {
		conn, err := net.Dial("unix", cd.Socket)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	return cd
}

// Snapshotter is the one kiln warm's --unpack picks on cd (auto):
// overlayfs when that plugin loaded, else native.
func (cd *Containerd) Snapshotter(t testing.TB) string {
	out, _ := cd.Ctr(t, "plugins", "ls")
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == "io.containerd.snapshotter.v1" && f[1] == "overlayfs" && f[len(f)-1] == "ok" {
			return "overlayfs"
		}
	}
	return "native"
}

// Ctr runs containerd's own client against cd and returns its combined
// output.
func (cd *Containerd) Ctr(t testing.TB, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("ctr", append([]string{"--address", cd.Socket}, args...)...).CombinedOutput()
	return string(out), err
}
