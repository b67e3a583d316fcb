// Package scratch makes the scratch directories of one kiln run and sweeps
// those that killed runs left behind.
//
// A scratch directory is named PREFIX-PID-RANDOM after the process that
// made it. Its own run removes it when it ends, on success, failure or
// SIGINT/SIGTERM; a run killed outright (SIGKILL, the OOM killer, a power
// cut) cannot, so every Dir call first removes its siblings of the same
// prefix whose process is gone.
package scratch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Dir sweeps dead runs' scratch directories named prefix in parent (the
// system's temporary directory when empty), then makes a new one for this
// process and returns it.
// A parent that does not exist yet is made (a --work-dir NEWDIR).
func Dir(parent, prefix string) (string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("scratch directory %s: %v", parent, err)
	}
	Sweep(parent, prefix)
	d, err := os.MkdirTemp(parent, prefix+"-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("scratch directory in %s: %v", parent, err)
	}
	return d, nil
}

// Sweep removes the directories PREFIX-PID-* in parent whose process PID
// no longer exists. What cannot be removed is left (another user's, a
// read-only mount); a PID that runs again under another program keeps its
// directory, which is the safe way round.
func Sweep(parent, prefix string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix+"-")
		if !ok || !e.IsDir() {
			continue
		}
		id, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(id)
		if err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(parent, e.Name()))
	}
}

// alive reports whether process pid exists (signal 0: EPERM means it does,
// as another user's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
