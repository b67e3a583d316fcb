package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff/apply"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
)

// UnpackAsReady implements PipelinedUnpacker with containerd's own unpack
// steps. Every layer's snapshot is committed under its chain ID on its
// parent chain, in manifest order, only after containerd has committed
// (verified) the layer blob and the uncompressed stream matched the
// config's diff ID — what containerd's unpacker and `ctr images pull` do,
// so the snapshots are the same. Then, as client.Image.Unpack does, the
// layer blobs get the uncompressed label and the config the
// gc.ref.snapshot label that keeps the snapshots from garbage collection.
//
// How the bytes get there depends on the snapshotter (see unpack_staged.go):
// on overlayfs, whose layers are independent directories, up to
// Options.UnpackConcurrency layers are applied at once, each into a
// snapshot of its own without a parent, and rebased (containerd 2.x) or
// moved (1.6) onto its parent chain when that is committed; elsewhere one
// layer at a time, each on its committed parent.
func (t *Containerd) UnpackAsReady(ctx context.Context, s *warm.Set, ready warm.Readiness) error {
	sn, err := t.snapshotterFor(ctx, s)
	if err != nil {
		return err
	}
	t.snapshotter = sn
	ctx = t.nsCtx(ctx)
	snaps := t.c.SnapshotService(sn)
	mode, why := t.stageMode(ctx, sn)
	t.mu.Lock()
	t.stage, t.stageWhy, t.unpackStart, t.trace = mode, why, time.Now(), nil
	t.mu.Unlock()
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
		layers := make([]rootfs.Layer, len(ls))
		for i, l := range ls {
			layers[i] = rootfs.Layer{Blob: l, Diff: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: diffIDs[i]}}
		}
		switch {
		case sn == SnapshotterErofs:
			err = t.unpackErofs(ctx, layers, snaps, ready)
		case mode == stageNone:
			err = t.unpackSequential(ctx, layers, snaps, ready)
		default:
			err = t.unpackStaged(ctx, layers, snaps, ready, mode)
		}
		if err != nil {
			return fmt.Errorf("image %s into %s: %v", img.Name, sn, err)
		}
		if err := ready.Wait(ctx, img.Config.Digest); err != nil {
			return err
		}
		key := "containerd.io/gc.ref.snapshot." + sn
		info := content.Info{Digest: img.Config.Digest, Labels: map[string]string{key: identity.ChainID(diffIDs).String()}}
		if _, err := t.cs.Update(ctx, info, "labels."+key); err != nil {
			return fmt.Errorf("labels on %s: %v", img.Config.Digest, err)
		}
	}
	return nil
}

// unpackSequential applies the layers one at a time, each on its
// committed parent.
func (t *Containerd) unpackSequential(ctx context.Context, layers []rootfs.Layer, snaps snapshots.Snapshotter, ready warm.Readiness) error {
	var chain []digest.Digest
	for _, layer := range layers {
		tr := t.traceStart(layer)
		how, err := t.applyOnParent(ctx, layer, chain, snaps, ready, tr)
		if err != nil {
			return fmt.Errorf("layer %s: %v", layer.Blob.Digest, err)
		}
		t.traceDone(tr, how, false)
		chain = append(chain, layer.Diff.Digest)
	}
	return nil
}

// applyOnParent applies one layer on its committed parent chain: streamed
// from the growing ingest, else in-process from the committed blob file,
// else by containerd's diff service; then the blob gets the uncompressed
// label. It returns how the layer got there (a how* constant).
func (t *Containerd) applyOnParent(ctx context.Context, layer rootfs.Layer, chain []digest.Digest, sn snapshots.Snapshotter, ready warm.Readiness, tr *warm.LayerTrace) (string, error) {
	chainID := identity.ChainID(append(slices.Clone(chain), layer.Diff.Digest)).String()
	if _, err := sn.Stat(ctx, chainID); err == nil {
		return warm.HowPresent, nil // an earlier run (or pull) made it
	}
	src, how, err := t.layerSource(ctx, layer.Blob, ready)
	if err != nil {
		return "", err
	}
	t.traceMark(&tr.Start)
	applied := false
	if src != nil {
		if applied, err = t.applyWith(ctx, layer, chain, sn, src, ready, tr); err != nil {
			return "", err
		}
		if !applied && how == warm.HowStreamed {
			// The stream failed (a write that stopped, say): the
			// committed blob file is read next.
			if err := ready.Wait(ctx, layer.Blob.Digest); err != nil {
				return "", err
			}
			if src, how = t.blobFile(layer.Blob); src != nil {
				if applied, err = t.applyWith(ctx, layer, chain, sn, src, ready, tr); err != nil {
					return "", err
				}
			}
		}
	}
	if applied {
		t.countHow(how)
	} else {
		if err := ready.Wait(ctx, layer.Blob.Digest); err != nil {
			return "", err
		}
		how = warm.HowDaemon
		t.traceMark(&tr.Verified)
		if applied, err = rootfs.ApplyLayerWithOpts(ctx, layer, chain, sn, t.c.DiffService(), nil, nil); err != nil {
			return "", err
		}
		t.traceMark(&tr.Applied)
		if !applied {
			return warm.HowPresent, nil
		}
	}
	return how, t.labelUncompressed(ctx, layer)
}

// labelUncompressed sets the blob's uncompressed label, only after an
// apply verified the diff ID.
func (t *Containerd) labelUncompressed(ctx context.Context, layer rootfs.Layer) error {
	info := content.Info{Digest: layer.Blob.Digest, Labels: map[string]string{labels.LabelUncompressed: layer.Diff.Digest.String()}}
	if _, err := t.cs.Update(ctx, info, "labels."+labels.LabelUncompressed); err != nil {
		return fmt.Errorf("labels on %s: %v", layer.Blob.Digest, err)
	}
	return nil
}

// layerSource returns a reader of the layer blob for an in-process apply:
// the direct ingest while it is still being written (the download and the
// apply overlap: a read past the bytes written waits for the writer), or
// the committed blob file in the local content root. nil when neither is
// here (remote containerd, gRPC ingest): containerd's diff service applies
// it. An error when the blob was not fetched.
func (t *Containerd) layerSource(ctx context.Context, blob ocispec.Descriptor, ready warm.Readiness) (content.ReaderAt, string, error) {
	if li := t.live.wait(ctx, blob.Digest, ready.Settled(blob.Digest)); li != nil {
		if r := li.reader(); r != nil {
			return r, warm.HowStreamed, nil
		}
	}
	if err := ready.Wait(ctx, blob.Digest); err != nil {
		return nil, "", err
	}
	src, how := t.blobFile(blob)
	return src, how, nil
}

// blobFile opens a committed blob in the local content root: applied in
// kiln's process rather than through the daemon's diff service, it gets
// klauspost's gzip decoder (containerd 1.6's daemon uses the standard
// library's, about half as fast) and no gRPC round trip. containerd
// verified the blob when it was committed; the diff ID is checked again by
// the apply.
func (t *Containerd) blobFile(blob ocispec.Descriptor) (content.ReaderAt, string) {
	root, _ := t.Direct()
	if root == "" {
		return nil, ""
	}
	f, err := os.Open(filepath.Join(root, "blobs", blob.Digest.Algorithm().String(), blob.Digest.Encoded()))
	if err != nil {
		return nil, ""
	}
	return sizedFile{f, blob.Size}, warm.HowLocal
}

// countHow counts an in-process apply for Streamed.
func (t *Containerd) countHow(how string) {
	switch how {
	case warm.HowStreamed:
		t.streamed.Add(1)
	case warm.HowLocal:
		t.local.Add(1)
	}
}

// noteFallback records why an in-process or staged apply was given up.
func (t *Containerd) noteFallback(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streamErr = err
}

type sizedFile struct {
	*os.File
	size int64
}

func (f sizedFile) Size() int64 { return f.size }

// applyWith prepares the layer's snapshot on its parent chain, applies the
// blob read from src (see applyInto), waits for containerd to have
// committed the blob, and commits the snapshot under its chain ID. false
// (and nothing left behind) when it did not work: the caller falls back to
// the daemon's apply. src is closed.
func (t *Containerd) applyWith(ctx context.Context, layer rootfs.Layer, chain []digest.Digest, sn snapshots.Snapshotter, src content.ReaderAt, ready warm.Readiness, tr *warm.LayerTrace) (bool, error) {
	chainID := identity.ChainID(append(slices.Clone(chain), layer.Diff.Digest)).String()
	parent := identity.ChainID(chain).String()
	if len(chain) == 0 {
		parent = ""
	}
	key := unpackKey(chainID)
	// Cleanup must run even when the warm was cancelled.
	cctx := context.WithoutCancel(ctx)
	mounts, err := prepareSnapshot(ctx, sn, key, parent)
	if err != nil {
		src.Close()
		return false, fmt.Errorf("prepare snapshot %s: %v", key, err)
	}
	err = t.applyInto(ctx, layer, mounts, src)
	if err == nil {
		t.traceMark(&tr.Applied)
		err = ready.Wait(ctx, layer.Blob.Digest)
	}
	if err == nil {
		t.traceMark(&tr.Verified)
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
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if errors.Is(err, errRefusedEntry) || errors.Is(err, errWrongDiffID) {
		// No other apply may write what kiln's rule refused, or a layer
		// that is not what its config says.
		return false, err
	}
	t.inprocFailures.Add(1)
	t.noteFallback(err)
	return false, nil
}

// applyInto applies the blob read from src to mounts with containerd's
// file-system applier (the archive code the daemon's diff service runs:
// overlay whiteouts, parent directories from the lower layers), decoded
// in a goroutine of its own (see decodedProvider), and checks the diff
// ID. src is closed.
func (t *Containerd) applyInto(ctx context.Context, layer rootfs.Layer, mounts []mount.Mount, src content.ReaderAt) error {
	desc := layer.Blob
	desc.MediaType = ocispec.MediaTypeImageLayer // decoded by the provider
	dir, _ := upperDir(mounts)
	diff, err := apply.NewFileSystemApplier(decodedProvider{src: src, tar: true, dir: dir}).Apply(ctx, desc, mounts)
	if err == nil && diff.Digest != layer.Diff.Digest {
		err = wrongDiffID(layer, diff.Digest)
	}
	return err
}

// errWrongDiffID marks a layer whose content does not hash to its
// config's diff ID (D12): no other apply may make a snapshot of it either.
var errWrongDiffID = fmt.Errorf("the manifest's layers are not the image its config describes: %w", registry.ErrDigestMismatch)

func wrongDiffID(layer rootfs.Layer, got digest.Digest) error {
	return fmt.Errorf("its content hashes to %s, but the config says %s: %w", got, layer.Diff.Digest, errWrongDiffID)
}

// prepareSnapshot prepares the active snapshot key on parent, waiting for
// the daemon's answer whatever ctx's state: a Prepare cancelled mid-call
// may still be carried out after the client gave up, and a Remove sent at
// once can reach the daemon first and find nothing, leaving the snapshot
// behind (CI saw an "extract-… sha256:…" snapshot outlive an interrupted
// warm under load). Once the answer is in, a warm cancelled meanwhile
// removes what was prepared; on an error nothing is left either.
func prepareSnapshot(ctx context.Context, sn snapshots.Snapshotter, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	mounts, err := sn.Prepare(cctx, key, parent, opts...)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		sn.Remove(context.WithoutCancel(ctx), key)
		return nil, err
	}
	return mounts, nil
}

// ProvesLayers implements warm.ProvingUnpacker: every layer the unpack
// applies in-process (streamed or from the committed blob) is decoded
// through kiln's entry rule and hashed against its config's diff ID
// (applyInto, applyDir, buildErofs), or is a native EROFS image whose diff
// ID is its blob digest, verified by containerd's commit (linkErofs). Not
// with --erofs-cache: a layer found in the cache is not read at all.
func (t *Containerd) ProvesLayers() bool { return t.erofsCache == "" }

var _ warm.ProvingUnpacker = (*Containerd)(nil)
