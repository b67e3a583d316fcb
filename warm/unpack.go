package warm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff/apply"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// PipelinedUnpacker is an Unpacker that can apply each layer as soon as it
// and the layers below it are committed, while later layers are still
// being fetched. ready blocks until a blob of the set is committed (nil)
// or failed to be.
type PipelinedUnpacker interface {
	UnpackAsReady(ctx context.Context, s *Set, ready Readiness) error
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

// UnpackAsReady implements PipelinedUnpacker with containerd's own unpack
// steps, one layer at a time in manifest order (each snapshot's parent is
// the one below): rootfs.ApplyLayerWithOpts prepares a snapshot on the
// parent chain, applies the blob through the daemon's diff service (which
// decompresses it, checks the diff ID and writes the snapshot) and commits
// it under its chain ID — what containerd's unpacker and `ctr images pull`
// do, so the snapshots are the same. Then, as client.Image.Unpack does, the
// layer blobs get the uncompressed label and the config the
// gc.ref.snapshot label that keeps the snapshots from garbage collection.
func (t *Containerd) UnpackAsReady(ctx context.Context, s *Set, ready Readiness) error {
	sn, err := t.pickSnapshotter(ctx)
	if err != nil {
		return err
	}
	t.snapshotter = sn
	ctx = t.nsCtx(ctx)
	snaps := t.c.SnapshotService(sn)
	applier := t.c.DiffService()
	data := map[digest.Digest][]byte{}
	for _, b := range s.Blobs {
		if b.Data != nil {
			data[b.Digest] = b.Data
		}
	}
	for _, img := range s.Images {
		var cfg ocispec.Image
		if err := json.Unmarshal(data[img.Config.Digest], &cfg); err != nil {
			return fmt.Errorf("image %s: config %s: %v", img.Name, img.Config.Digest, err)
		}
		var ls []ocispec.Descriptor
		for _, l := range img.Layers {
			if images.IsLayerType(l.MediaType) {
				ls = append(ls, l)
			}
		}
		diffIDs := cfg.RootFS.DiffIDs
		if len(diffIDs) != len(ls) {
			return fmt.Errorf("image %s: config %s: rootfs.diff_ids has %d entries for %d layers", img.Name, img.Config.Digest, len(diffIDs), len(ls))
		}
		var chain []digest.Digest
		for i, l := range ls {
			layer := rootfs.Layer{Blob: l, Diff: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: diffIDs[i]}}
			applied, err := t.applyStreaming(ctx, layer, chain, snaps, ready)
			if err != nil {
				return fmt.Errorf("image %s into %s: layer %s: %v", img.Name, sn, l.Digest, err)
			}
			if !applied {
				// Not streamed (present before, finished first, written
				// through gRPC, or the stream failed): the committed
				// blob is applied in-process when it is local, else (or
				// if that fails) by containerd's diff service.
				if err := ready.Wait(ctx, l.Digest); err != nil {
					return err
				}
				applied, err = t.applyLocal(ctx, layer, chain, snaps, ready)
				if err != nil {
					return fmt.Errorf("image %s into %s: layer %s: %v", img.Name, sn, l.Digest, err)
				}
			}
			if !applied {
				applied, err = rootfs.ApplyLayerWithOpts(ctx, layer, chain, snaps, applier, nil, nil)
				if err != nil {
					return fmt.Errorf("image %s into %s: layer %s: %v", img.Name, sn, l.Digest, err)
				}
			}
			if applied {
				// Set only after apply verified the diff ID.
				info := content.Info{Digest: l.Digest, Labels: map[string]string{labels.LabelUncompressed: diffIDs[i].String()}}
				if _, err := t.cs.Update(ctx, info, "labels."+labels.LabelUncompressed); err != nil {
					return fmt.Errorf("labels on %s: %v", l.Digest, err)
				}
			}
			chain = append(chain, diffIDs[i])
		}
		if err := ready.Wait(ctx, img.Config.Digest); err != nil {
			return err
		}
		key := "containerd.io/gc.ref.snapshot." + sn
		info := content.Info{Digest: img.Config.Digest, Labels: map[string]string{key: identity.ChainID(chain).String()}}
		if _, err := t.cs.Update(ctx, info, "labels."+key); err != nil {
			return fmt.Errorf("labels on %s: %v", img.Config.Digest, err)
		}
	}
	return nil
}

// applyStreaming applies a layer while its blob is still being written
// into a direct ingest: containerd's in-process file-system applier (the
// same archive code the daemon's diff service runs: overlay whiteouts,
// parent directories) reads the growing ingest file. The diff ID of what
// was applied is checked, and the snapshot is committed under its chain ID
// only after containerd has committed (verified) the blob as well. It
// returns false, with nothing left behind, when the layer was not streamed:
// the caller then has the daemon apply the committed blob.
func (t *Containerd) applyStreaming(ctx context.Context, layer rootfs.Layer, chain []digest.Digest, sn snapshots.Snapshotter, ready Readiness) (bool, error) {
	chainID := identity.ChainID(append(slices.Clone(chain), layer.Diff.Digest)).String()
	if _, err := sn.Stat(ctx, chainID); err == nil {
		return true, nil // an earlier run (or pull) made it
	}
	li := t.live.wait(ctx, layer.Blob.Digest, ready.Settled(layer.Blob.Digest))
	if li == nil {
		return false, ctx.Err()
	}
	r := li.reader()
	if r == nil {
		return false, nil // it finished first: see applyLocal
	}
	defer r.Close()
	ok, err := t.applyWith(ctx, layer, chain, sn, r, ready)
	if err == nil {
		if ok {
			t.streamed.Add(1)
		} else {
			t.inprocFailures.Add(1)
		}
	}
	return ok, err
}

// applyLocal applies a committed layer in kiln's process from the blob
// file in containerd's content root (when that root is on this host), not
// through the daemon's diff service: the same archive code, but with
// klauspost's gzip decoder (containerd 1.6's daemon uses the standard
// library's, about half as fast) and no gRPC round trip. The blob was
// verified by containerd when it was committed; the diff ID is checked
// again here.
func (t *Containerd) applyLocal(ctx context.Context, layer rootfs.Layer, chain []digest.Digest, sn snapshots.Snapshotter, ready Readiness) (bool, error) {
	root, _ := t.Direct()
	if root == "" {
		return false, nil
	}
	f, err := os.Open(filepath.Join(root, "blobs", layer.Blob.Digest.Algorithm().String(), layer.Blob.Digest.Encoded()))
	if err != nil {
		return false, nil
	}
	ok, err := t.applyWith(ctx, layer, chain, sn, sizedFile{f, layer.Blob.Size}, ready)
	if err == nil {
		if ok {
			t.local.Add(1)
		} else {
			t.inprocFailures.Add(1)
		}
	}
	return ok, err
}

type sizedFile struct {
	*os.File
	size int64
}

func (f sizedFile) Size() int64 { return f.size }

// applyWith prepares the layer's snapshot on its parent chain, applies the
// blob read from src (decompressed in a goroutine of its own, see
// decodedProvider) with containerd's file-system applier, checks the diff
// ID, waits for containerd to have committed the blob, and commits the
// snapshot under its chain ID. false (and nothing left behind) when it did
// not work: the caller falls back to the daemon's apply. src is closed.
func (t *Containerd) applyWith(ctx context.Context, layer rootfs.Layer, chain []digest.Digest, sn snapshots.Snapshotter, src content.ReaderAt, ready Readiness) (bool, error) {
	prov := decodedProvider{src}
	desc := layer.Blob
	desc.MediaType = ocispec.MediaTypeImageLayer // decoded by prov
	chainID := identity.ChainID(append(slices.Clone(chain), layer.Diff.Digest)).String()
	parent := identity.ChainID(chain).String()
	if len(chain) == 0 {
		parent = ""
	}
	key := fmt.Sprintf(snapshots.UnpackKeyFormat, fmt.Sprintf("%d-kiln", time.Now().UnixNano()), chainID)
	// Cleanup must run even when the warm was cancelled.
	cctx := context.WithoutCancel(ctx)
	mounts, err := sn.Prepare(ctx, key, parent)
	if err != nil {
		// A cancelled call may still have been carried out.
		sn.Remove(cctx, key)
		src.Close()
		return false, fmt.Errorf("prepare snapshot %s: %v", key, err)
	}
	diff, err := apply.NewFileSystemApplier(prov).Apply(ctx, desc, mounts)
	if err == nil && diff.Digest != layer.Diff.Digest {
		err = fmt.Errorf("wrong diff id %s, the config says %s", diff.Digest, layer.Diff.Digest)
	}
	if err == nil {
		err = ready.Wait(ctx, layer.Blob.Digest)
	}
	if err == nil {
		err = sn.Commit(ctx, chainID, key)
		if errdefs.IsAlreadyExists(err) {
			sn.Remove(cctx, key)
			return true, nil
		}
		if err != nil {
			sn.Remove(cctx, key)
			return false, fmt.Errorf("commit snapshot %s: %v", chainID, err)
		}
		return true, nil
	}
	if rerr := sn.Remove(cctx, key); rerr != nil {
		err = fmt.Errorf("%v; removing snapshot %s: %v", err, key, rerr)
	}
	t.mu.Lock()
	t.streamErr = err
	t.mu.Unlock()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	return false, nil
}
