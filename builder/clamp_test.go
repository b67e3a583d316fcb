package builder

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The wrapper every run step gets (clampScript), run here with the step's
// root moved into a temporary directory: what the step writes (files,
// directories, a link, a file in a directory it changed) ends at the
// epoch; what it did not touch and what is under its mounts keeps its
// time; the marker is gone; a failing step fails with its own status.
func TestClampScriptSetsWhatTheStepWrote(t *testing.T) {
	root, shm := t.TempDir(), t.TempDir()
	marker := filepath.Join(shm, ".kiln-step-start")
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, d := range []string{"etc", "keep", "mnt/cache"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/old.conf", "keep/untouched"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"etc", "etc/old.conf", "keep", "keep/untouched", "mnt", "mnt/cache"} {
		if err := os.Chtimes(filepath.Join(root, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	const epoch = 1700000000
	// The step's mounts, as the runtime lists them: a cache under root
	// (the root itself is not skipped).
	mountinfo := filepath.Join(shm, "mountinfo")
	mi := "22 1 0:21 / " + root + " rw - overlay overlay rw\n" +
		"23 22 0:22 / " + filepath.Join(root, "mnt/cache") + " rw - ext4 /dev/vda rw\n" +
		"24 22 0:23 / /proc rw - proc proc rw\n"
	if err := os.WriteFile(mountinfo, []byte(mi), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(shell string) ([]byte, error) {
		sh := clampScript(root, marker, mountinfo, epoch)
		return exec.Command("/bin/sh", "-c", sh, "kiln-step", shell).CombinedOutput()
	}
	step := `cd "$R" && echo new >etc/new.conf && mkdir -p opt/app && echo b >opt/app/b && ln -s missing opt/link && echo c >mnt/cache/pip`
	t.Setenv("R", root)
	if out, err := run(step); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	mtime := func(p string) time.Time {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime().UTC()
	}
	at := time.Unix(epoch, 0).UTC()
	for _, p := range []string{"etc", "etc/new.conf", "opt", "opt/app", "opt/app/b", "opt/link"} {
		if got := mtime(p); !got.Equal(at) {
			t.Errorf("%s: %s, want the epoch %s", p, got, at)
		}
	}
	for _, p := range []string{"etc/old.conf", "keep", "keep/untouched", "mnt"} {
		if got := mtime(p); !got.Equal(old) {
			t.Errorf("%s (not written by the step): %s, want %s", p, got, old)
		}
	}
	for _, p := range []string{"mnt/cache", "mnt/cache/pip"} {
		if got := mtime(p); got.Equal(at) || got.Equal(old) {
			t.Errorf("%s, a mount of the step and what the step wrote there: %s, want the time it was written", p, got)
		}
	}
	if _, err := os.Lstat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the marker is left: %v", err)
	}

	// A step that fails exits with its status, and its files are left.
	out, err := run(`cd "$R" && echo x >failed && exit 3`)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("a failing step: %v %s", err, out)
	}
	// The step's own shell gets its command whole: quotes, $ and newlines.
	out, err = run("printf '%s|' \"a b\" '$HOME'\necho")
	if err != nil || strings.TrimSpace(string(out)) != "a b|$HOME|" {
		t.Errorf("the step's command: %q %v", out, err)
	}
}

// Every run step of a build with an epoch runs in the wrapper; the
// step's command is its last argument, unchanged.
func TestRunStepsClampTheirFiles(t *testing.T) {
	epoch := int64(0)
	p := testPlan(t, nil)
	d, _ := decode(t, p, Inputs{SourceDateEpoch: &epoch}, false)
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, st := range []Stage{L.Devel, L.Runtime} {
		for _, s := range st.Steps {
			if !s.IsFile() {
				want[s.Shell] = true
			}
		}
	}
	n := 0
	for _, e := range d.execs {
		a := e.Meta.Args
		if len(a) == 5 && a[3] == "kiln-step" && want[a[4]] && strings.Contains(a[2], "-exec touch -h -d @0 {} +") {
			n++
		} else {
			t.Errorf("a run step without the wrapper: %q", a)
		}
	}
	if n != len(want) || n == 0 {
		t.Errorf("%d wrapped run steps, want %d", n, len(want))
	}
}

// A step that fails is named by its own command in the build's error, as
// before the wrapper, not by clampScript's lines; the error underneath is
// BuildKit's.
func TestStepErrorNamesTheStep(t *testing.T) {
	epoch := int64(7)
	step := Step{Shell: `set -e; apt-get install -y "python3"`}
	cause := errors.New("exit code: 100")
	// As BuildKit's exec op words it (solver/llbsolver/ops/exec.go).
	err := fmt.Errorf("failed to solve: process %q did not complete successfully: %w", strings.Join(runArgs(step, &epoch), " "), cause)
	got := stepError(err, &epoch)
	want := fmt.Sprintf("failed to solve: process %q did not complete successfully: exit code: 100", "/bin/sh -c "+step.Shell)
	if got.Error() != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if !errors.Is(got, cause) {
		t.Error("the error underneath is lost")
	}
	if other := errors.New("failed to solve: registry unreachable"); stepError(other, &epoch) != other {
		t.Error("an error naming no step changed")
	}
}
