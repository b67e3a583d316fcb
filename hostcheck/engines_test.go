package hostcheck_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/hostcheck"
)

// needEngines skips unless the test can start real engines (root, the
// binaries installed); KILN_REQUIRE_ENGINES=1 turns the skip into a failure.
func needEngines(t *testing.T, bins ...string) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root to start containerd/dockerd"
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil && why == "" {
			why = b + " not installed"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("KILN_REQUIRE_ENGINES") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// startDaemon starts a daemon and stops it (by its pid) when the test ends.
func startDaemon(t *testing.T, logName string, name string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), logName))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", name, lastLines(string(b), 30))
		}
	})
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func waitSocket(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("unix", p); err == nil {
			c.Close()
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: no daemon answered within 60s", p)
}

// TestRealEngines starts a real containerd and a real dockerd (on that
// containerd, with the sysroot's daemon.json registering nvidia) with
// their sockets at the standard places of a temporary root, and checks
// what Gather reports over those sockets.
func TestRealEngines(t *testing.T) {
	needEngines(t, "containerd", "dockerd")
	root := t.TempDir()
	state := t.TempDir()
	ctrSock := filepath.Join(root, "run/containerd/containerd.sock")
	dockSock := filepath.Join(root, "var/run/docker.sock")
	for _, d := range []string{filepath.Dir(ctrSock), filepath.Dir(dockSock), filepath.Join(root, "etc/docker")} {
		os.MkdirAll(d, 0o755)
	}
	daemonJSON := filepath.Join(root, "etc/docker/daemon.json")
	b, err := os.ReadFile(filepath.Join(testdata, "sysroot/h100/etc/docker/daemon.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(daemonJSON, b, 0o644)
	cfg := filepath.Join(state, "containerd.toml")
	os.WriteFile(cfg, []byte("version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"), 0o644)
	startDaemon(t, "containerd.log", "containerd", "--config", cfg, "--root", filepath.Join(state, "ctr-root"), "--state", filepath.Join(state, "ctr-state"), "--address", ctrSock)
	waitSocket(t, ctrSock)
	dataRoot := filepath.Join(state, "docker")
	startDaemon(t, "dockerd.log", "dockerd", "--config-file", daemonJSON, "--data-root", dataRoot, "--exec-root", filepath.Join(state, "exec"),
		"--pidfile", filepath.Join(state, "docker.pid"), "-H", "unix://"+dockSock, "--containerd", ctrSock,
		"--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=vfs")
	waitSocket(t, dockSock)

	h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: root, NvidiaSMI: "-", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var docker, ctr *hostcheck.Engine
	for i := range h.Engines {
		switch h.Engines[i].Kind {
		case hostcheck.EngineDocker:
			docker = &h.Engines[i]
		case hostcheck.EngineContainerd:
			ctr = &h.Engines[i]
		}
	}
	if docker == nil || !docker.Reachable || !strings.HasPrefix(docker.Version, "20.10") || !slices.Contains(docker.Runtimes, "nvidia") ||
		!slices.Contains(docker.Runtimes, "runc") || !docker.CanBuild || docker.DataRoot != dataRoot || docker.DataRootFreeBytes <= 0 || docker.Rootless {
		t.Errorf("docker = %+v", docker)
	}
	if ctr == nil || !ctr.Reachable || !strings.HasPrefix(ctr.Version, "1.") || ctr.CanBuild {
		t.Errorf("containerd = %+v", ctr)
	}
	r := hostcheck.Check(h, nil, hostcheck.Options{})
	if e := r.Item(hostcheck.IDEngine); e.Status != hostcheck.Pass || !strings.Contains(e.Summary, "docker, containerd reachable; images can be built here (docker)") {
		t.Errorf("engine = %+v", e)
	}
	if e := r.Item(hostcheck.IDToolkit); e.Status != hostcheck.Pass || !strings.Contains(strings.Join(e.Evidence, "\n"), "dockerd at "+dockSock+" reports runtime nvidia") {
		t.Errorf("toolkit = %+v", e)
	}
	if e := r.Item(hostcheck.IDVolumes); e.Status != hostcheck.Pass || !strings.Contains(strings.Join(e.Evidence, "\n"), "docker image store "+dataRoot) {
		t.Errorf("volumes = %+v", e)
	}
}

// TestEngineUnreachable: a socket file nobody listens on is reported as
// present but not reachable, and the engine item fails with a fix.
func TestEngineUnreachable(t *testing.T) {
	root := t.TempDir()
	sock := filepath.Join(root, "var/run/docker.sock")
	os.MkdirAll(filepath.Dir(sock), 0o755)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	h, err := hostcheck.Gather(context.Background(), hostcheck.GatherOptions{Root: root, NvidiaSMI: "-", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Engines) != 1 || h.Engines[0].Reachable || !strings.Contains(h.Engines[0].Error, "connection refused") {
		t.Fatalf("engines = %+v", h.Engines)
	}
	e := hostcheck.Check(h, nil, hostcheck.Options{}).Item(hostcheck.IDEngine)
	if e.Status != hostcheck.Fail || !strings.Contains(e.Summary, "docker socket present but not reachable") || len(e.Fix) == 0 {
		t.Errorf("engine = %+v", e)
	}
}
