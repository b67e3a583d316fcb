package testkit

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeTB records the first Fatalf, Skip or Skipf and ends its goroutine there,
// as testing.T does.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, a ...any) {
	f.fatal = fmt.Sprintf(format, a...)
	runtime.Goexit()
}
func (f *fakeTB) Skip(a ...any) {
	f.skip = fmt.Sprint(a...)
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, a ...any) {
	f.skip = fmt.Sprintf(format, a...)
	runtime.Goexit()
}

func run(fn func(t testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func TestNeedSkipsUnlessRequired(t *testing.T) {
	t.Setenv("KILN_REQUIRE_A", "")
	t.Setenv("KILN_REQUIRE_B", "0")
	f := run(func(tb testing.TB) { Need(tb, "no runc", "KILN_REQUIRE_A", "KILN_REQUIRE_B") })
	if f.skip != "no runc" || f.fatal != "" {
		t.Errorf("skip %q fatal %q", f.skip, f.fatal)
	}
	t.Setenv("KILN_REQUIRE_B", "1")
	f = run(func(tb testing.TB) { Need(tb, "no runc", "KILN_REQUIRE_A", "KILN_REQUIRE_B") })
	if f.fatal != "KILN_REQUIRE_B=1 but no runc" || f.skip != "" {
		t.Errorf("skip %q fatal %q", f.skip, f.fatal)
	}
}

func TestFixturesDir(t *testing.T) {
	t.Setenv("KILN_FIXTURES", "")
	t.Setenv("KILN_FIXTURE_CACHE", "")
	if got := FixturesDir(); got != "/var/cache/kiln-fixtures/out" {
		t.Errorf("default: %s", got)
	}
	t.Setenv("KILN_FIXTURE_CACHE", "/tmp/cache")
	if got := FixturesDir(); got != filepath.Join("/tmp/cache", "out") {
		t.Errorf("KILN_FIXTURE_CACHE: %s", got)
	}
	t.Setenv("KILN_FIXTURES", "/srv/fixtures")
	if got := FixturesDir(); got != "/srv/fixtures" {
		t.Errorf("KILN_FIXTURES: %s", got)
	}
}

// Without mkfs.erofs on PATH, RequireErofs skips naming the variable, and
// fails when that variable (KILN_REQUIRE_EROFS unless others are named) is 1.
func TestRequireErofsWithoutMkfs(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("KILN_REQUIRE_EROFS", "")
	t.Setenv("KILN_REQUIRE_CONTAINERD", "")
	f := run(func(tb testing.TB) { RequireErofs(tb) })
	if f.fatal != "" || !strings.HasSuffix(f.skip, "; KILN_REQUIRE_EROFS=1 to require") {
		t.Errorf("skip %q fatal %q", f.skip, f.fatal)
	}
	t.Setenv("KILN_REQUIRE_EROFS", "1")
	f = run(func(tb testing.TB) { RequireErofs(tb) })
	if !strings.HasPrefix(f.fatal, "KILN_REQUIRE_EROFS=1 but ") || !strings.Contains(f.fatal, "mkfs.erofs") {
		t.Errorf("skip %q fatal %q", f.skip, f.fatal)
	}
	// Only the named variables count.
	f = run(func(tb testing.TB) { RequireErofs(tb, "KILN_REQUIRE_CONTAINERD") })
	if f.fatal != "" || !strings.HasSuffix(f.skip, "; KILN_REQUIRE_CONTAINERD=1 to require") {
		t.Errorf("skip %q fatal %q", f.skip, f.fatal)
	}
	t.Setenv("KILN_REQUIRE_CONTAINERD", "1")
	f = run(func(tb testing.TB) { RequireErofs(tb, "KILN_REQUIRE_CONTAINERD") })
	if !strings.HasPrefix(f.fatal, "KILN_REQUIRE_CONTAINERD=1 but ") {
		t.Errorf("skip %q fatal %q", f.skip, f.fatal)
	}
}
