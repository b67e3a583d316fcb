package wheelcache

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
)

// A build's wheel cache logs in once to its repository: the lookup that
// misses (its tag, then the tag list for a wider wheel), the push of what
// was compiled, the lookup that hits and the fetch share one client,
// whose token may push.
func TestCacheOneTokenExchangePerRepository(t *testing.T) {
	ctx := context.Background()
	ta := testimage.TokenRegistry(t, false)
	c := open(t, ta.Host()+"/kiln/wheels", WithAllowWiderArchs(true))
	k := testKey()
	if e, err := c.Lookup(ctx, k); err != nil || e != nil {
		t.Fatalf("empty cache: %+v, %v", e, err)
	}
	if _, err := c.Push(ctx, k, writeWheel(t, "compiled wheel")); err != nil {
		t.Fatal(err)
	}
	e, err := c.Lookup(ctx, k)
	if err != nil || e == nil {
		t.Fatalf("after push: %+v, %v", e, err)
	}
	if _, err := c.Fetch(ctx, e, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if ex := ta.Exchanges(); len(ex) != 1 || ex["kiln/wheels"] != 1 {
		t.Errorf("token exchanges %v, want one, for kiln/wheels", ex)
	}
}

// kiln lock only looks: a read-only cache's logins ask for pull alone (a
// registry may refuse a push scope to a read-only credential outright),
// and it cannot push.
func TestReadOnlyCacheAsksForPullOnly(t *testing.T) {
	ctx := context.Background()
	ta := testimage.TokenRegistry(t, false)
	rw := open(t, ta.Host()+"/kiln/wheels")
	k := testKey()
	if _, err := rw.Push(ctx, k, writeWheel(t, "compiled wheel")); err != nil {
		t.Fatal(err)
	}
	ta.Reset()
	ro := open(t, ta.Host()+"/kiln/wheels").ReadOnly()
	e, err := ro.Lookup(ctx, k)
	if err != nil || e == nil {
		t.Fatalf("lookup: %+v, %v", e, err)
	}
	if _, err := ro.Fetch(ctx, e, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	for _, s := range ta.Scopes() {
		if strings.Contains(s, "push") {
			t.Errorf("a read-only cache asked for %s", s)
		}
	}
	if len(ta.Scopes()) == 0 {
		t.Error("no login counted")
	}
	if _, err := ro.Push(ctx, k, writeWheel(t, "x")); err == nil {
		t.Error("a read-only cache pushed")
	}
}
