//go:build linux

package slim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRecordOpens runs a command under the recorder on the host's root
// mount: the file it reads, the script it executes and the shell are in
// the list; a file it only stats is not. (On the host other processes'
// opens on / land in the list too; in the probe container the mount is the
// probe's alone.)
func TestRecordOpens(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fanotify mount marks need root (CAP_SYS_ADMIN)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "kiln-record-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if out, _ := os.ReadFile("/proc/self/mountinfo"); !bytes.Contains(out, []byte(" / / ")) {
		t.Skip("no root mount to mark")
	}
	read, stat, script := filepath.Join(dir, "read.txt"), filepath.Join(dir, "stat.txt"), filepath.Join(dir, "run.sh")
	for _, f := range []string{read, stat} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat "+read+" >/dev/null\ntest -e "+stat+"\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "opened")
	var stderr bytes.Buffer
	code, err := RecordOpens(context.Background(), out, "", []string{script}, nil, os.Stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 {
		t.Errorf("exit %d, want the command's 7 (stderr %q)", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !slices.IsSorted(got) {
		t.Error("list not sorted")
	}
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	for _, want := range []string{read, script, sh} {
		if !slices.Contains(got, want) {
			t.Errorf("%s not recorded", want)
		}
	}
	if slices.Contains(got, stat) || slices.Contains(got, dir) {
		t.Errorf("a stat-only file or a directory recorded: %v", got)
	}
}
