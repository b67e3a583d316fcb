package hostcheck

import (
	"bytes"
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
	// On a loaded machine the shell may not have started its child when
	// the timeout ends it (no pid file: nothing to check); again with a
	// longer timeout, until it has.
	var b []byte
	for _, timeout := range []time.Duration{300 * time.Millisecond, 3 * time.Second, 15 * time.Second} {
		done := make(chan error, 1)
		go func() {
			_, err := run(context.Background(), timeout, prog)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a hung program succeeded")
			}
		case <-time.After(30*time.Second + timeout):
			t.Fatalf("run still waiting 30s after its %s timeout: the child holds stdout", timeout)
		}
		var err error
		if b, err = os.ReadFile(pidFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			break
		}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		t.Fatal("the program never started its child, even with a 15s timeout")
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	testkit.WaitGone(t, pid, "the program's child")
}
