package hostcheck

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"
)

// An nvidia-smi that hangs on a broken driver, and whose child holds its
// stdout, is ended with everything it started when the timeout passes
// (or kiln is interrupted): run returns, and no child is left running.
func TestRunKillsHungProgramAndChildren(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	prog := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nsleep 300 &\necho $! > "+pidFile+"\nwait\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := run(context.Background(), 300*time.Millisecond, prog)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a hung program succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run still waiting 30s after its 300ms timeout: the child holds stdout")
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	testkit.WaitGone(t, pid, "the program's child")
}
