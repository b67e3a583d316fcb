package containerd

import (
	"context"

	"github.com/containerd/containerd/v2/client"
)

// What the external tests look at inside a Containerd target.

// LeaseID is the lease this run holds.
func (t *Containerd) LeaseID() string { return t.leaseID }

// Client is the target's containerd client.
func (t *Containerd) Client() *client.Client { return t.c }

// PickSnapshotter is the snapshotter --unpack uses.
func (t *Containerd) PickSnapshotter(ctx context.Context) (string, error) {
	return t.pickSnapshotter(ctx)
}

// EarlyMin is the smallest blob a direct ingest opens early.
var EarlyMin = &earlyMin

// EarlyHits and EarlyMisses count the direct ingests whose early open
// hashed the whole blob, or caught up too soon.
func (t *Containerd) EarlyHits() int64   { return t.earlyHits.Load() }
func (t *Containerd) EarlyMisses() int64 { return t.earlyMisses.Load() }
