package erofs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers/erofs"
)

// TestMkfsDiesWithKiln (issue 34): a kiln killed mid-conversion (SIGKILL:
// no context ends, no deferred call runs) takes its mkfs.erofs with it,
// instead of leaving it waiting for a file's data with a scratch file of
// the size the header declared. The test runs itself as that kiln.
func TestMkfsDiesWithKiln(t *testing.T) {
	if os.Getenv("KILN_TEST_CONVERT_FOREVER") == "1" {
		convertForever(t)
		return
	}
	testkit.RequireErofs(t)
	kiln := exec.Command(os.Args[0], "-test.run=^TestMkfsDiesWithKiln$")
	kiln.Env = append(os.Environ(), "KILN_TEST_CONVERT_FOREVER=1", "TMPDIR="+t.TempDir())
	if err := kiln.Start(); err != nil {
		t.Fatal(err)
	}
	mkfs := 0
	for deadline := time.Now().Add(20 * time.Second); mkfs == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mkfs = childNamed(kiln.Process.Pid, erofs.Mkfs)
	}
	kiln.Process.Kill()
	kiln.Wait()
	if mkfs == 0 {
		t.Fatal("mkfs.erofs never started")
	}
	for deadline := time.Now().Add(5 * time.Second); alive(mkfs); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(mkfs, syscall.SIGKILL)
			t.Fatalf("mkfs.erofs (pid %d) outlived the kiln that ran it", mkfs)
		}
	}
}

// convertForever converts a tar whose one file never finishes arriving.
func convertForever(t *testing.T) {
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	tw.WriteHeader(&tar.Header{Name: "slow", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 30})
	pr, pw := io.Pipe()
	go pw.Write(hdr.Bytes()) // and nothing more
	erofs.Convert(context.Background(), pr, io.Discard)
}

// childNamed is the pid of a child of parent running prog, or 0.
func childNamed(parent int, prog string) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(b, ')')
		j := bytes.IndexByte(b, '(')
		if i < 0 || j < 0 || string(b[j+1:i]) != prog[:min(len(prog), 15)] {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(parent) {
			pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
			return pid
		}
	}
	return 0
}

// alive says whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z'
}
