package fleet

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostileHost is host 0 of a one-host fleet whose kiln_path is script
// (a shell script written on the host) instead of kiln.
func hostileHost(t *testing.T, e *fleetEnv, script string) Host {
	t.Helper()
	p := filepath.Join(e.hosts[0].dir, "hostile-kiln")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	h := e.host(0, ModePull)
	h.KilnPath = p
	return h
}

// A host whose kiln warm hangs and ignores SIGTERM, SIGINT and SIGHUP
// (as does every child it starts): cancelling the run (what SIGINT or
// SIGTERM does to kiln) ends the fleet run within seconds, and the remote
// command is gone, not left running on the host.
func TestFleetCancelEndsHungHost(t *testing.T) {
	e := newFleetEnv(t, 1)
	pidFile := filepath.Join(e.hosts[0].dir, "hung.pid")
	h := hostileHost(t, e, "trap '' TERM INT HUP PIPE\nsleep 600 &\necho $! > "+pidFile+"\nwhile :; do wait; done\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := e.options()
	o.Event = func(host, what string) {
		if what == "warm started" {
			go func() {
				// Cancel once the hostile command is really running.
				for ctx.Err() == nil {
					if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
						cancel()
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
	}
	done := make(chan []Result, 1)
	go func() { done <- Run(ctx, []Host{h}, o) }()
	var res []Result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("fleet run still going 60s after it was cancelled: a hung host holds kiln")
	}
	if r := res[0]; r.State != StateFailed || !strings.Contains(r.Error, "context canceled") {
		t.Errorf("hung host: %+v", r)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// The remote sleep dies of SIGKILL; wait for the kernel to reap it
	// rather than assume how long that takes.
	for i := 0; processAlive(pid); i++ {
		if i == 3000 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the remote command (pid %d) is still running after the fleet run was cancelled", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processAlive reports whether pid runs (a zombie counts as gone).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// A host that prints 100 MB to stdout where one JSON report belongs: the
// host fails with a message that says so, and the controller does not
// hold what it printed.
func TestFleetBoundsHostStdout(t *testing.T) {
	e := newFleetEnv(t, 1)
	h := hostileHost(t, e, "head -c 100000000 /dev/zero\n")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := Run(context.Background(), []Host{h}, e.options())[0]
	runtime.ReadMemStats(&after)
	if r.State != StateFailed || !strings.Contains(r.Error, "stdout") || !strings.Contains(r.Error, "MiB") {
		t.Errorf("flooding host: state %s error %q, want failed for too much stdout", r.State, r.Error)
	}
	// Holding the 100 MB takes a buffer of 100 MB and the smaller ones it
	// grew from: over 200 MiB allocated. Reading up to the 16 MiB bound
	// (and the SSH packets it came in) stays well under 150 MiB.
	if got := after.TotalAlloc - before.TotalAlloc; got > 150<<20 {
		t.Errorf("controller allocated %d MiB for a host's 100 MB of stdout", got>>20)
	}
}

// A host whose stderr carries terminal escapes (retitle the window, clear
// the screen, a carriage return over kiln's line): the host's error keeps
// its words and loses the escapes before anything prints it.
func TestFleetStripsHostEscapes(t *testing.T) {
	e := newFleetEnv(t, 1)
	h := hostileHost(t, e, `printf 'kiln: disk \033]0;pwned\007\033[2Jfull\r\n' >&2; exit 1`+"\n")
	r := Run(context.Background(), []Host{h}, e.options())[0]
	if r.State != StateFailed || !strings.Contains(r.Error, "disk") || !strings.Contains(r.Error, "full") {
		t.Fatalf("%+v", r)
	}
	if strings.ContainsAny(r.Error, "\x1b\x07\r") {
		t.Errorf("host error %q carries terminal control characters", r.Error)
	}
}

// kiln warm status reads nodes' pod logs: what a node printed is cleaned
// the same way.
func TestStatusLogsStripEscapes(t *testing.T) {
	logs := `{"host":"node-1\u001b]0;x\u0007","address":"","mode":"pull","state":"failed","ready":false,"missing_bytes":0,"fetched_bytes":0,"seconds":0,"binary_copied":false,"exit_code":1,"error":"bad\u001b[2J\r"}` + "\n"
	res, err := ReadStatusLogs(strings.NewReader(logs), "logs")
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Host != "node-1]0;x" || r.Error != "bad[2J" {
		t.Errorf("host %q error %q, want the control characters gone", r.Host, r.Error)
	}
}
