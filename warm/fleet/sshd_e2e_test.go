package fleet

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/kiln-build/kiln/internal/testdaemon"
)

// requireSSH skips unless real sshd hosts can be started here: root (sshd
// runs sessions as a user only when root) and Debian's openssh-server.
// KILN_REQUIRE_SSH=1 turns the skip into a failure (CI).
func requireSSH(t *testing.T) {
	t.Helper()
	testdaemon.SkipShort(t)
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		why = "no /usr/sbin/sshd (openssh-server)"
	}
	if why == "" {
		return
	}
	if os.Getenv("KILN_REQUIRE_SSH") == "1" {
		t.Fatalf("KILN_REQUIRE_SSH=1 but %s", why)
	}
	t.Skipf("real sshd hosts unavailable (%s); KILN_REQUIRE_SSH=1 to require", why)
}

// testKey is an ed25519 key written as an OpenSSH private key file.
type testKey struct {
	file   string
	public ssh.PublicKey
}

func newKey(t *testing.T, file string) testKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{file: file, public: signer.PublicKey()}
}

// sshHost is a real sshd on a loopback port, standing in for a GPU host:
// its own host key, authorized keys and $HOME (SetEnv), so two of them on
// one machine do not share ~/.cache/kiln.
type sshHost struct {
	dir, home string
	addr      string
	hostKey   testKey
	cmd       *exec.Cmd
	once      sync.Once
}

func startSSHD(t *testing.T, client testKey) *sshHost {
	t.Helper()
	requireSSH(t)
	// sshd refuses to start without its privilege separation directory,
	// which Debian's service unit would create.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h := &sshHost{dir: dir, home: filepath.Join(dir, "home")}
	if err := os.Mkdir(h.home, 0o755); err != nil {
		t.Fatal(err)
	}
	h.hostKey = newKey(t, filepath.Join(dir, "host_key"))
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, ssh.MarshalAuthorizedKey(client.public), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sshd_config")
	conf := fmt.Sprintf(`ListenAddress 127.0.0.1
HostKey %[1]s/host_key
AuthorizedKeysFile %[1]s/authorized_keys
PidFile %[1]s/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin yes
SetEnv HOME=%[2]s
`, dir, h.home)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	h.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	log, err := os.Create(filepath.Join(dir, "sshd.log"))
	if err != nil {
		t.Fatal(err)
	}
	h.cmd = exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", cfg, "-p", strconv.Itoa(port), "-h", h.hostKey.file)
	h.cmd.Stdout, h.cmd.Stderr = log, log
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.kill()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("sshd %s log:\n%s", h.addr, b)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", h.addr)
		if err == nil {
			c.Close()
			return h
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("sshd on %s did not start: %v\n%s", h.addr, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends this sshd and every process under it (its sessions and the
// commands they run), by pid: what a host that drops off the network
// looks like from here.
func (h *sshHost) kill() {
	h.once.Do(func() {
		pids := descendants(h.cmd.Process.Pid)
		_ = h.cmd.Process.Signal(syscall.SIGKILL)
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		_ = h.cmd.Wait()
	})
}

// descendants lists the pids whose parent chain reaches root, from /proc.
func descendants(root int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// stat: pid (comm) state ppid ...; comm may hold spaces.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				parent[pid] = pp
			}
		}
	}
	var out []int
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// knownHostsLine is this host's known_hosts entry.
func (h *sshHost) knownHostsLine() string {
	return knownHostsEntry(h.addr, h.hostKey.public)
}

func knownHostsEntry(addr string, k ssh.PublicKey) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(k))
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestMain(m *testing.M) {
	code := m.Run()
	testdaemon.RemoveKilnBinary()
	os.Exit(code)
}
