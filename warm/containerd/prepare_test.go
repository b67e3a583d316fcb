package containerd

import (
	"context"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
)

// lateSnapshotter is a daemon under load: a Prepare whose caller gave up
// (its context cancelled) is still carried out, after the call returned
// (settle), so a Remove sent at once finds nothing.
type lateSnapshotter struct {
	snapshots.Snapshotter
	active  map[string]bool
	pending []string
	live    bool // the last Prepare's context was not cancelled
}

func (s *lateSnapshotter) Prepare(ctx context.Context, key, parent string, _ ...snapshots.Opt) ([]mount.Mount, error) {
	s.live = ctx.Err() == nil
	if !s.live {
		s.pending = append(s.pending, key)
		return nil, ctx.Err()
	}
	s.active[key] = true
	return nil, nil
}

func (s *lateSnapshotter) Remove(_ context.Context, key string) error {
	if !s.active[key] {
		return errdefs.ErrNotFound
	}
	delete(s.active, key)
	return nil
}

func (s *lateSnapshotter) settle() {
	for _, k := range s.pending {
		s.active[k] = true
	}
}

// TestPrepareSnapshotLeavesNothingWhenCancelled: a warm cancelled around a
// Prepare leaves no active snapshot behind, even when the daemon carries
// out the Prepare late (the CI saw an "extract-… sha256:…" snapshot outlive
// an interrupted warm, TestWarmPipelinedUnpack under load).
func TestPrepareSnapshotLeavesNothingWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sn := &lateSnapshotter{active: map[string]bool{}}
	if _, err := prepareSnapshot(ctx, sn, unpackKey("sha256:abc"), ""); err == nil {
		t.Fatal("a cancelled warm's prepare succeeded")
	}
	sn.settle()
	if !sn.live || len(sn.active) != 0 {
		t.Fatalf("Prepare saw a live context: %v; active snapshots left: %v", sn.live, sn.active)
	}
	// And a warm not cancelled gets its snapshot.
	if _, err := prepareSnapshot(context.Background(), sn, "k", ""); err != nil || !sn.active["k"] {
		t.Fatalf("prepare: %v, active %v", err, sn.active)
	}
}
