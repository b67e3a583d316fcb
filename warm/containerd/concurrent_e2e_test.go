package containerd_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/containerd"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/targets"
)

// TestWarmConcurrentContainerdLeases: two runs on one containerd take
// leases of their own, so the first to finish does not delete the one
// still protecting the other (F8).
func TestWarmConcurrentContainerdLeases(t *testing.T) {
	ci := testdaemon.StartContainerd(t)
	ctx := context.Background()
	ingest := containerd.IngestGRPC
	open := func() warm.Target {
		tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{Namespace: "default", Ingest: ingest})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tgt.Close() })
		return tgt
	}
	// The same set twice: the same image warmed by two runs at once.
	f, _ := warmtest.TwoImages(t)
	set := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, f.Ref)
	a, b := open().(*containerd.Containerd), open().(*containerd.Containerd)
	if err := a.Lease(ctx, set); err != nil {
		t.Fatal(err)
	}
	if err := b.Lease(ctx, set); err != nil {
		t.Fatal(err)
	}
	if a.LeaseID() == b.LeaseID() {
		t.Fatalf("two runs share lease %s", a.LeaseID())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := ci.Ctr(t, "leases", "ls")
	if err != nil || !strings.Contains(out, b.LeaseID()) {
		t.Fatalf("the first run's release took the second's lease: %v\n%s", err, out)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
	// Both write paths: a second writer of a blob waits for the first.
	for _, ingest = range []string{containerd.IngestGRPC, containerd.IngestDirect} {
		warmtest.WarmBoth(t, []string{f.Ref, f.Ref}, open)
		if out, err := ci.Ctr(t, "leases", "ls"); err != nil || strings.Contains(out, "kiln-warm") {
			t.Fatalf("%s: lease left behind: %v %s", ingest, err, out)
		}
		if out, err := ci.Ctr(t, "images", "rm", "--sync", f.Ref); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
}
