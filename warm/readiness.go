package warm

import (
	"context"
	"fmt"
	"sync"

	"github.com/opencontainers/go-digest"
)

// PipelinedUnpacker is an Unpacker that can apply each layer as soon as it
// and the layers below it are committed, while later layers are still
// being fetched. ready blocks until a blob of the set is committed (nil)
// or failed to be.
type PipelinedUnpacker interface {
	UnpackAsReady(ctx context.Context, s *Set, ready Readiness) error
}

// ProvingUnpacker is a PipelinedUnpacker whose unpack checks every layer
// it applies itself (UnpackTrace: HowStreamed, HowLocal) against its image
// config's diff ID and kiln's entry rule as it decodes it, when
// ProvesLayers says so. The engine then leaves those layers to it rather
// than decoding them a second time (diffcheck.go), checks any it did not
// apply (present, or applied by the daemon) by reading them back, and
// records the images only once the unpack has proven them.
type ProvingUnpacker interface {
	PipelinedUnpacker
	UnpackReporter
	ProvesLayers() bool
}

// Readiness says when the blobs of a running warm are committed.
type Readiness interface {
	// Wait blocks until d is committed (nil) or failed to be.
	Wait(ctx context.Context, d digest.Digest) error
	// Settled is closed once d is committed or failed.
	Settled(d digest.Digest) <-chan struct{}
}

// readiness tracks which blobs of a warm are committed, for the pipelined
// unpack.
type readiness struct {
	mu  sync.Mutex
	ch  map[digest.Digest]chan struct{}
	err map[digest.Digest]error
}

func newReadiness() *readiness {
	return &readiness{ch: map[digest.Digest]chan struct{}{}, err: map[digest.Digest]error{}}
}

// pending registers d as being fetched.
func (r *readiness) pending(d digest.Digest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ch[d] = make(chan struct{})
}

// done marks d committed (err nil) or failed; later calls are ignored.
func (r *readiness) done(d digest.Digest, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, ok := r.ch[d]
	if !ok {
		return
	}
	select {
	case <-ch:
		return
	default:
	}
	if err != nil {
		r.err[d] = err
	}
	close(ch)
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Settled implements Readiness.
func (r *readiness) Settled(d digest.Digest) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.ch[d]; ok {
		return ch
	}
	return closedCh
}

// Wait implements Readiness; a digest never registered was present before
// the warm.
func (r *readiness) Wait(ctx context.Context, d digest.Digest) error {
	r.mu.Lock()
	ch, ok := r.ch[d]
	r.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.err[d]; err != nil {
		return fmt.Errorf("blob %s was not fetched: %v", d, err)
	}
	return nil
}
