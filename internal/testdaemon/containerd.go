package testdaemon

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Containerd is a running containerd.
type Containerd struct {
	Socket string // gRPC API socket
	Root   string // content and snapshots
	State  string
	Bin    string // the containerd binary that runs
	Config string // the config file it was started with
	Major  int    // its major version (1 for Debian's 1.6, 2 for 2.x)
}

// KILN_CONTAINERD_BIN names another containerd binary (e.g. the 2.x that
// scripts/containerd2.sh builds) for the tests to run instead of the one
// on PATH, and KILN_CTR_BIN its ctr (default: the ctr next to that binary,
// else ctr on PATH). The same tests then cover both content stores.
const (
	envContainerdBin = "KILN_CONTAINERD_BIN"
	envCtrBin        = "KILN_CTR_BIN"
)

// StartContainerd starts containerd with its own root, state, socket and
// config (CRI and the snapshotters that need special filesystems
// disabled), and waits until it answers on the socket.
func StartContainerd(t testing.TB, opts ...Option) *Containerd {
	t.Helper()
	c := newConfig("KILN_REQUIRE_CONTAINERD", opts)
	bin := c.lookup(t, envOr(envContainerdBin, "containerd"))
	if os.Getenv(envContainerdBin) != "" {
		// Its own containerd-shim-runc-v2, when one lies next to it: a 2.x
		// daemon cannot drive Debian's 1.6 shim.
		c.pathFirst = filepath.Dir(bin)
	}
	dir := t.TempDir()
	short := shortDir(t, "kcd")
	cd := &Containerd{Socket: c.socket, Root: filepath.Join(dir, "root"), State: filepath.Join(short, "state"), Bin: bin, Major: majorVersion(t, bin)}
	if cd.Socket == "" {
		cd.Socket = filepath.Join(short, "c.sock")
	} else if err := os.MkdirAll(filepath.Dir(cd.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	cri := `"io.containerd.grpc.v1.cri", `
	if c.cri {
		cri = ""
	}
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = [%s"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, cd.Root, cd.State, cri, cd.Socket, cd.Socket+".ttrpc") + c.extraConfig
	cfg := filepath.Join(dir, "config.toml")
	cd.Config = cfg
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

// Ctr runs containerd's own client against cd and returns its output:
// stdout, followed by stderr when it fails. (ctr 2.x logs warnings such as
// cgroup v1's deprecation on stderr of every command, which would
// otherwise end up in listings the tests parse.)
func (cd *Containerd) Ctr(t testing.TB, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(cd.ctrBin(), append([]string{"--address", cd.Socket}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		stdout.Write(stderr.Bytes())
	}
	return stdout.String(), err
}

// ctrBin is the ctr that matches cd.Bin: KILN_CTR_BIN, the ctr next to a
// KILN_CONTAINERD_BIN, or ctr on PATH.
func (cd *Containerd) ctrBin() string {
	if p := os.Getenv(envCtrBin); p != "" {
		return p
	}
	if os.Getenv(envContainerdBin) != "" {
		p := filepath.Join(filepath.Dir(cd.Bin), "ctr")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "ctr"
}

// majorVersion reads the major version from `containerd --version`
// ("containerd github.com/containerd/containerd 1.6.20~ds1 ..." or
// "containerd github.com/containerd/containerd/v2 v2.4.2 ...").
func majorVersion(t testing.TB, bin string) int {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		t.Fatalf("%s --version: unexpected %q", bin, out)
	}
	maj, _, _ := strings.Cut(strings.TrimPrefix(f[2], "v"), ".")
	n, err := strconv.Atoi(maj)
	if err != nil {
		t.Fatalf("%s --version: no major version in %q", bin, out)
	}
	return n
}

// PullArgs is `ctr images pull` limited to what containerd 1.6's pull
// fetches: ctr 2.x by default also fetches every other platform's manifest
// and config ("all metadata", so the image can be pushed again);
// --skip-metadata turns that off.
func (cd *Containerd) PullArgs() []string {
	if cd.Major >= 2 {
		return []string{"images", "pull", "--skip-metadata"}
	}
	return []string{"images", "pull"}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// RunOutput runs argv in a new container of ref (ctr run --rm, with the
// snapshotter and the extra ctr run flags given) and returns what argv
// wrote to its stdout (when it fails: ctr's output, then argv's stdout
// and stderr). The output goes to a file in a writable bind mount
// rather than through ctr's stdout FIFO, whose copy can end before the
// last bytes of a process that exits at once (a CI run lost the second
// half of a sha256sum listing that way). The image needs /bin/sh.
func (cd *Containerd) RunOutput(t testing.TB, snapshotter, ref, id string, flags []string, argv ...string) (string, error) {
	t.Helper()
	out := shortDir(t, "kout") // t.TempDir holds the test's name, which may hold a comma: ctr's --mount splits on it
	args := []string{"run", "--rm", "--snapshotter", snapshotter,
		"--mount", "type=bind,src=" + out + ",dst=/kiln-out,options=rbind:rw"}
	args = append(args, flags...)
	args = append(args, ref, id, "/bin/sh", "-c", `"$@" >/kiln-out/stdout 2>/kiln-out/stderr`, "sh")
	msg, err := cd.Ctr(t, append(args, argv...)...)
	b, rerr := os.ReadFile(filepath.Join(out, "stdout"))
	if err != nil {
		e, _ := os.ReadFile(filepath.Join(out, "stderr"))
		return msg + string(b) + string(e), err
	}
	return string(b), rerr
}
