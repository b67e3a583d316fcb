package testdaemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// PruneAfter drops, when t ends, what a test that pushes and probes
// gigabytes leaves on the shared machine: every repository of the local
// registry but the fixtures' (scripts/registry.sh prune: the registry is
// stopped, the repositories removed, the blobs garbage-collected, the
// registry started again) and, with buildkit, BuildKit's whole cache
// (buildctl prune --all at $BUILDKIT_HOST: the probes' images). So a
// whole suite's pushes and probe images never sit on the disk together:
// the disk is the machine's binding limit. It runs only with
// KILN_PRUNE_AFTER_TESTS=1 (CI sets it), so a developer's own images and
// build cache are left alone. A test that skipped prunes nothing: it
// pushed nothing, and CI's fast tier (-short, where every such test
// skips) runs beside the tier whose builds push to the same registry,
// which a prune stops and empties.
func PruneAfter(t testing.TB, buildkit bool) {
	if os.Getenv("KILN_PRUNE_AFTER_TESTS") != "1" {
		return
	}
	script, err := RepoFile("scripts/registry.sh")
	if err != nil {
		t.Fatalf("KILN_PRUNE_AFTER_TESTS=1: %v", err)
	}
	t.Cleanup(func() {
		if t.Skipped() {
			return
		}
		prune(t, script, buildkit)
	})
}

// prune is PruneAfter's cleanup (a variable: its test records the calls
// instead of stopping the machine's registry).
var prune = func(t testing.TB, script string, buildkit bool) {
	out, err := exec.Command("bash", script, "prune").CombinedOutput()
	if err != nil {
		t.Errorf("registry.sh prune: %v\n%s", err, out)
	} else {
		t.Logf("%s", out)
	}
	if host := os.Getenv("BUILDKIT_HOST"); buildkit && host != "" {
		if out, err := exec.Command("buildctl", "--addr", host, "prune", "--all").CombinedOutput(); err != nil {
			t.Errorf("buildctl prune --all: %v\n%s", err, out)
		}
	}
}

// RepoFile finds rel in the module's root, walking up from the test's
// directory.
func RepoFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, rel)
			_, err := os.Stat(p)
			return p, err
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", os.ErrNotExist
		}
		dir = up
	}
}
