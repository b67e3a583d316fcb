package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs kiln's own main when KILN_TEST_MAIN is set: the test
// binary stands in for kiln, signals included.
func TestMain(m *testing.M) {
	if os.Getenv("KILN_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// SIGTERM ends kiln within seconds even where its work does not watch the
// context: here `warm status --from-logs -` reading a pipe that never
// closes (kubectl logs -f piped in). Before, kiln kept reading for ever.
func TestSignalEndsKilnWhateverItIsDoing(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0], "warm", "status", "--from-logs", "-")
		cmd.Env = append(os.Environ(), "KILN_TEST_MAIN=1")
		stdin, err := cmd.StdinPipe() // held open: the read never ends
		if err != nil {
			t.Fatal(err)
		}
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The signal handler is installed before the read begins; a signal
		// sent before that would end the process with the default action,
		// which proves nothing. Wait until the process reads its stdin.
		for i := 0; !readingStdin(cmd.Process.Pid); i++ {
			if i == 2000 {
				t.Fatal("kiln never started reading stdin")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("%v: kiln still running 60s after the signal", sig)
		}
		stdin.Close()
		if code := cmd.ProcessState.ExitCode(); code != 130 {
			t.Errorf("%v: exit %d, want 130; stderr %s", sig, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), "interrupted") {
			t.Errorf("%v: stderr %q, want it to say kiln was interrupted", sig, errOut.String())
		}
	}
}

// readingStdin reports whether a thread of pid is blocked in read(2) on
// fd 0 (/proc/PID/task/TID/syscall: "0 0x0 ..." is read of fd 0), which
// kiln does only after its signal handling is set up.
func readingStdin(pid int) bool {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/syscall")
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), "0 0x0 ") {
			return true
		}
	}
	return false
}
