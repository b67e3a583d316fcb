package testdaemon

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Option changes how a daemon is started.
type Option func(*config)

type config struct {
	socket  string
	require []string
	args    []string
	// pathFirst is put in front of the daemon's PATH (where containerd
	// looks for its shim first).
	pathFirst string
	// extraConfig is appended to a generated daemon config file.
	extraConfig string
	// cri leaves containerd's CRI plugin enabled.
	cri bool
}

// Socket puts the daemon's API socket at path instead of a fresh short
// directory under /tmp (for tests that look for sockets at the standard
// places of a temporary root). Its parent directory is created.
func Socket(path string) Option { return func(c *config) { c.socket = path } }

// RequireEnv adds environment variables that, set to 1, turn a skip
// (not root, no binary, no start) into a failure.
func RequireEnv(names ...string) Option {
	return func(c *config) { c.require = append(c.require, names...) }
}

// ExtraConfig appends TOML to containerd's generated config (version 2
// tables), for tests that check what containerd's config says.
func ExtraConfig(toml string) Option { return func(c *config) { c.extraConfig += toml } }

// EnableCRI leaves containerd's CRI plugin enabled (it is disabled by
// default: the tests drive containerd through its own API), for tests of
// the CRI settings containerd reports: `containerd config dump` shows a
// disabled plugin's defaults, not the file's values.
func EnableCRI() Option { return func(c *config) { c.cri = true } }

// Args appends command-line arguments to the daemon's own.
func Args(args ...string) Option { return func(c *config) { c.args = append(c.args, args...) } }

func newConfig(requireEnv string, opts []Option) *config {
	c := &config{require: []string{requireEnv}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// skip skips t, or fails it when one of the require variables is 1.
func (c *config) skip(t testing.TB, why string) {
	t.Helper()
	for _, e := range c.require {
		if os.Getenv(e) == "1" {
			t.Fatalf("%s=1 but %s", e, why)
		}
	}
	t.Skip(why)
}

// SkipShort skips a test that starts a daemon (containerd, dockerd,
// sshd, BuildKit) in -short mode: the fast tier (make unit) runs pure
// packages and in-process registries under the race detector; the e2e
// tier (make e2e) runs these, without it, where the KILN_REQUIRE_*
// variables make a missing daemon fail.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a daemon: the e2e tier runs it (make e2e)")
	}
}

// lookup finds bin, skipping unless the test runs as root and bin is
// installed.
func (c *config) lookup(t testing.TB, bin string) string {
	t.Helper()
	SkipShort(t)
	if os.Geteuid() != 0 {
		c.skip(t, bin+" tests need root")
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		c.skip(t, "no "+bin+" binary")
	}
	return p
}

// shortDir is a fresh directory directly under /tmp, removed when the test
// ends: unix socket paths are limited to 108 bytes and t.TempDir paths can
// be longer.
func shortDir(t testing.TB, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(d)
		os.RemoveAll(d)
	})
	return d
}

// process is a started daemon with its log.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
}

// start runs bin in its own process group with output to dir/NAME.log and
// stops it when the test ends: SIGTERM, then SIGKILL after stopWait; then
// unmounts what is left mounted under each of unmount (a mount would keep
// TempDir from cleaning up) and, if the test failed, logs the log's tail.
func (c *config) start(t testing.TB, bin, dir string, stopWait time.Duration, unmount []string, args ...string) *process {
	t.Helper()
	name := filepath.Base(bin)
	p := &process{name: name, log: filepath.Join(dir, name+".log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, append(args, c.args...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if c.pathFirst != "" {
		p.cmd.Env = append(os.Environ(), "PATH="+c.pathFirst+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		c.skip(t, name+" does not start: "+err.Error())
	}
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopWait):
			p.cmd.Process.Kill()
			<-done
		}
		logf.Close()
		for _, u := range unmount {
			unmountUnder(u)
		}
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, p.tail())
		}
	})
	return p
}

// wait polls ready until it is true, failing the test with the log's tail
// after timeout.
func (p *process) wait(t testing.TB, timeout time.Duration, what string, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ready() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not %s within %s:\n%s", p.name, what, timeout, p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tail is the end of the log without its info and debug lines (a
// daemon's start alone is 3 KB of "loading plugin"), so that a failing
// test's own lines stay in CI's tail of the output.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=info") || strings.Contains(l, "level=debug") || strings.TrimSpace(l) == "" {
			continue
		}
		keep = append(keep, l)
	}
	s := strings.Join(keep, "\n")
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	if s == "" {
		return "(no warnings or errors)"
	}
	return s
}

// unmountUnder detaches every mount below root, deepest first.
func unmountUnder(root string) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var dev, mp string
		fmt.Sscan(sc.Text(), &dev, &mp)
		if strings.HasPrefix(mp, root+"/") {
			mps = append(mps, mp)
		}
	}
	for i := len(mps) - 1; i >= 0; i-- {
		syscall.Unmount(mps[i], syscall.MNT_DETACH)
	}
}
