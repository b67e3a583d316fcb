package testdaemon

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDockerdOnContainerd starts a containerd at a chosen socket and a
// dockerd that uses it, and checks both answer: containerd through ctr,
// dockerd through its API with an empty image store at its own root.
func TestDockerdOnContainerd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run/containerd/containerd.sock")
	cd := StartContainerd(t, Socket(sock))
	if cd.Socket != sock {
		t.Fatalf("socket %s, want %s", cd.Socket, sock)
	}
	out, err := cd.Ctr(t, "version")
	if err != nil || !strings.Contains(out, "Server:") {
		t.Fatalf("ctr version: %v\n%s", err, out)
	}
	dk := StartDockerd(t, Args("--containerd", cd.Socket, "--storage-driver=vfs"))
	if ids := dk.Images(t); len(ids) != 0 {
		t.Errorf("fresh dockerd has images %v", ids)
	}
	if _, ok := dk.Inspect(t, "kiln-testdaemon:none"); ok {
		t.Error("Inspect of a missing image reported it present")
	}
	if _, err := os.Stat(dk.Root); err != nil {
		t.Errorf("data root: %v", err)
	}
}

// TestRequireEnv: the daemon's own variable and those a caller adds each
// turn a skip into a failure; others do not.
func TestRequireEnv(t *testing.T) {
	tests := []struct {
		env  map[string]string
		opts []Option
		fail bool
	}{
		{env: nil, fail: false},
		{env: map[string]string{"KILN_REQUIRE_CONTAINERD": "1"}, fail: true},
		{env: map[string]string{"KILN_REQUIRE_CONTAINERD": "0"}, fail: false},
		{env: map[string]string{"KILN_REQUIRE_ENGINES": "1"}, fail: false},
		{env: map[string]string{"KILN_REQUIRE_ENGINES": "1"}, opts: []Option{RequireEnv("KILN_REQUIRE_ENGINES")}, fail: true},
	}
	for i, tc := range tests {
		for _, k := range []string{"KILN_REQUIRE_CONTAINERD", "KILN_REQUIRE_ENGINES"} {
			t.Setenv(k, tc.env[k])
		}
		c := newConfig("KILN_REQUIRE_CONTAINERD", tc.opts)
		rec := &recorder{}
		done := make(chan struct{})
		// skip ends its goroutine (Skip/Fatal call runtime.Goexit).
		go func() { defer close(done); c.skip(rec, "no containerd binary") }()
		<-done
		if rec.failed != tc.fail || rec.skipped == tc.fail {
			t.Errorf("%d: env %v: failed=%v skipped=%v, want fail=%v", i, tc.env, rec.failed, rec.skipped, tc.fail)
		}
	}
}

// recorder is a testing.TB that records how skip ended it.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func (r *recorder) Skip(...any)           { r.skipped = true; runtime.Goexit() }
