// Package testkit holds the test helpers that cut across packages and
// fit neither testimage (images built in-process) nor testdaemon (real
// engines started for a test): skip-or-fail on a missing prerequisite,
// the EROFS tools, the fixtures directory.
//
// A missing prerequisite skips the test unless one of the environment
// variables that require it is 1 (.ci/run sets the KILN_REQUIRE_*
// variables), in which case the test fails: CI cannot pass as a skip.
//
// It imports no other test kit and starts no daemon, so a test package
// may import it without joining the e2e tier (a test file that starts a
// daemon or uses BuildKit is named *e2e_test.go: TestDaemonTestsNamedE2E).
// It imports layers (Refs) and layers/erofs (RequireErofs), so the
// packages those build on (layers, registry, layers/blob, ...) may use it
// only from their external (package x_test) tests.
package testkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/registry"
)

// Need skips t for why, or fails it ("NAME=1 but why") when one of the
// require variables is 1.
func Need(t testing.TB, why string, require ...string) {
	t.Helper()
	for _, e := range require {
		if os.Getenv(e) == "1" {
			t.Fatalf("%s=1 but %s", e, why)
		}
	}
	t.Skip(why)
}

// RequireErofs skips t without mkfs.erofs 1.7+ and fsck.erofs
// (erofs.Check), unless one of the require variables is 1 (default
// KILN_REQUIRE_EROFS: CI, where scripts/install-deps.sh installs them),
// which makes that a failure.
func RequireErofs(t testing.TB, require ...string) {
	t.Helper()
	if len(require) == 0 {
		require = []string{"KILN_REQUIRE_EROFS"}
	}
	if err := erofs.Check(context.Background()); err != nil {
		for _, e := range require {
			if os.Getenv(e) == "1" {
				t.Fatalf("%s=1 but %v", e, err)
			}
		}
		t.Skipf("%v; %s=1 to require", err, require[0])
	}
}

// WaitGone waits up to 10s for pid to exit (or be a zombie, left for its
// parent to reap); if it still runs, it kills it and fails t ("who PID
// still runs after the timeout"). For tests that a timeout or a kill
// takes a process's children with it.
func WaitGone(t testing.TB, pid int, who string) {
	t.Helper()
	for i := 0; ; i++ {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if i == 1000 {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s %d still runs after the timeout", who, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FixturesDir is where scripts/fixtures.sh writes the gigabyte fixtures
// (expected.json, the OCI layout, the wheels): $KILN_FIXTURES, else
// $KILN_FIXTURE_CACHE/out, else /var/cache/kiln-fixtures/out. It does
// not check that the directory exists.
func FixturesDir() string {
	if dir := os.Getenv("KILN_FIXTURES"); dir != "" {
		return dir
	}
	cache := os.Getenv("KILN_FIXTURE_CACHE")
	if cache == "" {
		cache = "/var/cache/kiln-fixtures"
	}
	return filepath.Join(cache, "out")
}

// Deps is `go list -deps PKG`: every package PKG compiles, itself
// included, for tests that hold an import boundary. It skips t where
// there is no go command.
func Deps(t testing.TB, pkg string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// Refs parses references as a command does, once, at the edge
// (layers.ParseRef): what the library APIs that take layers.Ref are given.
func Refs(t testing.TB, refs ...string) []layers.Ref {
	t.Helper()
	out := make([]layers.Ref, len(refs))
	for i, ref := range refs {
		r, err := layers.ParseRef(ref)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r
	}
	return out
}

// Ref is Refs of one reference.
func Ref(t testing.TB, ref string) layers.Ref {
	t.Helper()
	return Refs(t, ref)[0]
}

// OpenImage parses ref as a command does (layers.ParseRef, with opts)
// and opens it (layers.Open): a test names the images it reads as a user
// does. A reference that does not parse is the error returned.
func OpenImage(ctx context.Context, ref string, opts ...registry.Option) (*layers.Image, error) {
	r, err := layers.ParseRef(ref, opts...)
	if err != nil {
		return nil, err
	}
	return layers.Open(ctx, r, opts...)
}
