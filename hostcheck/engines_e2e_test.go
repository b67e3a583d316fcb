package hostcheck_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/hostcheck"
	"github.com/kiln-build/kiln/internal/testdaemon"
)

// TestRealEngines starts a real containerd and a real dockerd (on that
// containerd, with the sysroot's daemon.json registering nvidia) with
// their sockets at the standard places of a temporary root, and checks
// what Gather reports over those sockets.
func TestRealEngines(t *testing.T) {
	// KILN_REQUIRE_ENGINES=1 turns a skip (not root, no binary) into a failure.
	req := testdaemon.RequireEnv("KILN_REQUIRE_ENGINES")
	root := t.TempDir()
	ctrSock := filepath.Join(root, "run/containerd/containerd.sock")
	dockSock := filepath.Join(root, "var/run/docker.sock")
	daemonJSON := filepath.Join(root, "etc/docker/daemon.json")
	os.MkdirAll(filepath.Dir(daemonJSON), 0o755)
	b, err := os.ReadFile(filepath.Join(testdata, "sysroot/h100/etc/docker/daemon.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(daemonJSON, b, 0o644)
	testdaemon.StartContainerd(t, req, testdaemon.Socket(ctrSock))
	dk := testdaemon.StartDockerd(t, req, testdaemon.Socket(dockSock), testdaemon.Args("--config-file", daemonJSON,
		"--containerd", ctrSock, "--ip6tables=false", "--storage-driver=vfs"))
	dataRoot := dk.Root

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
	// The runtime settings the real dockerd reports (/info Driver: vfs, as
	// started) and the daemon.json it was started with (no
	// max-concurrent-downloads: dockerd's default 3).
	if docker != nil && docker.StorageDriver != "vfs" {
		t.Errorf("docker storage driver = %q", docker.StorageDriver)
	}
	if d := h.DockerConfig; d == nil || !d.Exists || d.ConfigFile != daemonJSON || d.MaxConcurrentDownloads != 3 {
		t.Errorf("docker daemon config = %+v", d)
	}
	if cc := h.ContainerdConfig; cc == nil || cc.Source != "defaults" || cc.Major != 1 || cc.MaxConcurrentDownloads != 3 {
		t.Errorf("containerd config = %+v", cc)
	}
	assertItem(t, r.Item(hostcheck.IDRuntime), hostcheck.Warn, []string{"Docker storage driver vfs"},
		[]string{"Docker storage driver vfs (dockerd /info at " + dockSock + ")", "Docker 20.10", "pulls gzip layers only: zstd needs Docker ≥ 23.0", "max-concurrent-downloads = 3"},
		[]string{`set "storage-driver": "overlay2" in ` + daemonJSON})
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
