package containerd

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/errdefs"
	"github.com/kiln-build/kiln/warm"
	"github.com/moby/sys/userns"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	"golang.org/x/sys/unix"
)

// Staged (parallel) unpack: why it is safe.
//
// A layer is applied on its parent so that the applier can (1) turn the
// tar's whiteouts into the snapshotter's own and (2) give directories the
// tar does not declare, but needs for its entries, the attributes they
// have in the layers below (archive.mkparent). On overlayfs neither needs
// the parent's files to exist while applying: every layer is a directory
// of its own (the snapshot's upperdir), whiteouts become 0/0 character
// devices and opaque directories an xattr (archive.OverlayConvertWhiteout)
// whatever lies below, and (2) concerns only directories the applier
// created itself, which can be fixed once the parent exists. So a layer
// can be applied before its parent is committed, into a snapshot prepared
// without a parent, and joined to the chain afterwards:
//
//   - containerd 2.x (the snapshotter advertises the "rebase" capability):
//     Commit(chainID, key, WithParent(parent)) — what containerd's own
//     unpacker does with max_concurrent_unpacks (core/unpack/unpacker.go:
//     Prepare without parent, bindToOverlay, Apply, Commit WithParent).
//   - containerd 1.6 (no rebase; overlayfs only): Prepare(key2, parent),
//     whose upperdir is empty, and exchange it with the staged layer's
//     directory (renameat2 RENAME_EXCHANGE, one file system, the same
//     snapshotter root) after giving the staged directory the mode and
//     owner containerd gave the new one; then Commit(chainID, key2) and
//     Remove the staged key (now holding the empty directory).
//
// Either way the committed snapshot holds exactly what an apply on the
// parent would have written, under the same chain ID, and it is committed
// in manifest order, only after its parent, after containerd committed
// (verified) the layer blob, and after the uncompressed stream hashed to
// the config's diff ID. A staged snapshot that is never committed (a
// failed stream, a cancelled warm) is removed; one a killed run leaves is
// an uncommitted active snapshot under the run's lease, collected with it.

// Stage modes for --unpack.
const (
	stageNone   = ""       // one layer at a time, each on its committed parent
	stageRebase = "rebase" // staged, joined by Commit WithParent (containerd 2.x)
	stageMove   = "move"   // staged, joined by exchanging directories (1.6)
)

// DefaultUnpackConcurrency is how many layers are applied at once when the
// snapshotter allows it. A layer of many small files is bound by the
// latency of its file syscalls and a large layer by decoding and writing;
// three lets the largest layer run beside the base layer and a small one
// without oversubscribing a small host (each apply runs two goroutines:
// decode and untar).
const DefaultUnpackConcurrency = 3

// UnpackTrace returns, per layer in manifest order, what the last unpack
// did, and the stage mode with why staging was off ("" when it was on).
func (t *Containerd) UnpackTrace() (trace []warm.LayerTrace, mode, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range t.trace {
		trace = append(trace, *tr)
	}
	return trace, t.stage, t.stageWhy
}

func (t *Containerd) traceStart(layer rootfs.Layer) *warm.LayerTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := &warm.LayerTrace{Digest: layer.Blob.Digest, Size: layer.Blob.Size}
	t.trace = append(t.trace, tr)
	return tr
}

func (t *Containerd) traceMark(at *time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	*at = time.Since(t.unpackStart)
}

func (t *Containerd) traceDone(tr *warm.LayerTrace, how string, staged bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr.How, tr.Staged, tr.Committed = how, staged, time.Since(t.unpackStart)
}

// stageMode decides whether layers are applied ahead of their parents
// (see above) and says why not.
func (t *Containerd) stageMode(ctx context.Context, sn string) (mode, why string) {
	if t.unpackConcurrency == 1 {
		return stageNone, "--unpack-concurrency 1"
	}
	if sn != "overlayfs" {
		return stageNone, "snapshotter " + sn + " copies each layer's parent"
	}
	if userns.RunningInUserNS() {
		// OverlayConvertWhiteout's mknod c 0 0 does not work there; the
		// applier then mounts the overlay instead, which needs the parent.
		return stageNone, "running in a user namespace"
	}
	if root, _ := t.Direct(); root == "" {
		// Staged layers are applied in kiln's process, from the ingest or
		// the committed blob file.
		return stageNone, "containerd's content root is not local"
	}
	caps, err := t.c.GetSnapshotterCapabilities(ctx, sn)
	if err == nil && slices.Contains(caps, snapshots.RebaseCap) {
		return stageRebase, ""
	}
	return stageMove, ""
}

// stagedLayer is one layer of a staged unpack: the top half (apply) runs
// in a goroutine of its own, the bottom half (commit) in manifest order.
type stagedLayer struct {
	i       int
	layer   rootfs.Layer
	chainID string
	done    chan struct{} // the top half finished
	trace   *warm.LayerTrace

	how string // warm.HowPresent, or how the bytes were read
	key string // the snapshot applied into ("": not applied ahead)
	// dir is key's directory and implicit the directories the layer did
	// not declare but created for its entries (i > 0 only).
	dir      string
	implicit []string
	err      error // fatal: the warm stops
}

// unpackStaged applies up to t.unpackConcurrency layers at once, each into
// a snapshot without a parent, and commits them in order onto the chain.
// A layer that could not be applied ahead (not local, a stream that
// failed) is applied on its committed parent in its turn, as
// unpackSequential does.
func (t *Containerd) unpackStaged(ctx context.Context, layers []rootfs.Layer, sn snapshots.Snapshotter, ready warm.Readiness, mode string) error {
	n := t.unpackConcurrency
	if n <= 0 {
		n = DefaultUnpackConcurrency
	}
	tctx, cancel := context.WithCancel(ctx)
	sem := make(chan struct{}, n)
	jobs := make([]*stagedLayer, len(layers))
	var diffs []digest.Digest
	for i, l := range layers {
		diffs = append(diffs, l.Diff.Digest)
		jobs[i] = &stagedLayer{i: i, layer: l, chainID: identity.ChainID(diffs).String(), done: make(chan struct{}), trace: t.traceStart(l)}
	}
	// Top halves start in manifest order, so the lower layers get the
	// first slots.
	go func() {
		for _, j := range jobs {
			select {
			case sem <- struct{}{}:
			case <-tctx.Done():
				j.err = tctx.Err()
				close(j.done)
				continue
			}
			go func() {
				defer func() { <-sem }()
				t.stageLayer(tctx, j, sn, ready)
			}()
		}
	}()
	// Cleanup must run even when the warm was cancelled. A top half still
	// reading a growing ingest returns once the download ends (the
	// engine's fetch commits or closes every writer), so this wait is
	// bounded by the fetch.
	cctx := context.WithoutCancel(ctx)
	defer func() {
		cancel()
		for _, j := range jobs {
			<-j.done
			if j.key != "" {
				sn.Remove(cctx, j.key)
			}
		}
	}()
	var chain []digest.Digest
	for _, j := range jobs {
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if j.err != nil {
			return fmt.Errorf("layer %s: %v", j.layer.Blob.Digest, j.err)
		}
		how, staged := j.how, j.key != ""
		if staged {
			err := t.commitStaged(ctx, j, chain, sn, ready, mode)
			if errors.Is(err, errUnstaged) {
				t.noteFallback(err)
				staged = false
			} else if err != nil {
				return fmt.Errorf("layer %s: %v", j.layer.Blob.Digest, err)
			}
		}
		if !staged && how != warm.HowPresent {
			var err error
			if how, err = t.applyOnParent(ctx, j.layer, chain, sn, ready, j.trace); err != nil {
				return fmt.Errorf("layer %s: %v", j.layer.Blob.Digest, err)
			}
		}
		t.traceDone(j.trace, how, staged && j.i > 0)
		chain = append(chain, j.layer.Diff.Digest)
	}
	return nil
}

// errUnstaged: a staged layer could not be joined to its chain; it is
// applied on its parent instead.
var errUnstaged = errors.New("staged layer not joined")

// stageLayer is the top half: the layer's bytes, read from the growing
// ingest or the committed blob file, applied into a new snapshot without a
// parent, the diff ID checked. It leaves j.key empty when the layer is to
// be applied on its parent instead.
func (t *Containerd) stageLayer(ctx context.Context, j *stagedLayer, sn snapshots.Snapshotter, ready warm.Readiness) {
	defer close(j.done)
	if _, err := sn.Stat(ctx, j.chainID); err == nil {
		j.how = warm.HowPresent
		return
	}
	src, how, err := t.layerSource(ctx, j.layer.Blob, ready)
	if err != nil {
		j.err = err
		return
	}
	if src == nil {
		return
	}
	t.traceMark(&j.trace.Start)
	cctx := context.WithoutCancel(ctx)
	key := unpackKey(j.chainID)
	mounts, err := prepareSnapshot(ctx, sn, key, "")
	if err != nil {
		src.Close()
		j.err = fmt.Errorf("prepare snapshot %s: %v", key, err)
		return
	}
	var dir string
	var implicit []string
	if j.i == 0 {
		// The bottom layer has no parent: this is its real snapshot.
		err = t.applyInto(ctx, j.layer, mounts, src)
	} else if d, ok := upperDir(mounts); !ok {
		src.Close()
		err = fmt.Errorf("%w: snapshot %s mounts as %v", errUnstaged, key, mountTypes(mounts))
	} else {
		dir = d
		implicit, err = applyDir(ctx, j.layer, dir, src)
	}
	if err != nil {
		sn.Remove(cctx, key)
		if ctx.Err() != nil {
			j.err = ctx.Err()
			return
		}
		if errors.Is(err, errRefusedEntry) || errors.Is(err, errWrongDiffID) {
			j.err = err // no other apply may write it
			return
		}
		t.inprocFailures.Add(1)
		t.noteFallback(err)
		return
	}
	t.traceMark(&j.trace.Applied)
	t.countHow(how)
	j.how, j.key, j.dir, j.implicit = how, key, dir, implicit
}

// commitStaged is the bottom half: once containerd committed the blob,
// the staged snapshot joins the chain under its chain ID (rebased, or
// moved into a snapshot prepared on the parent). errUnstaged when the
// layer must be applied on its parent instead (nothing is left behind).
func (t *Containerd) commitStaged(ctx context.Context, j *stagedLayer, chain []digest.Digest, sn snapshots.Snapshotter, ready warm.Readiness, mode string) error {
	cctx := context.WithoutCancel(ctx)
	staged := j.key
	j.key = "" // removed here, whatever happens
	defer sn.Remove(cctx, staged)
	if err := ready.Wait(ctx, j.layer.Blob.Digest); err != nil {
		return err
	}
	t.traceMark(&j.trace.Verified)
	chainID, parent := j.chainID, identity.ChainID(chain).String()
	var err error
	switch {
	case j.i == 0:
		err = sn.Commit(ctx, chainID, staged)
	case mode == stageRebase:
		if len(j.implicit) > 0 {
			lowers, release, verr := t.parentDirs(ctx, sn, parent)
			if verr != nil {
				return fmt.Errorf("%w: %v", errUnstaged, verr)
			}
			verr = fixImplicitDirs(j.dir, j.implicit, lowers)
			release()
			if verr != nil {
				return fmt.Errorf("%w: %v", errUnstaged, verr)
			}
		}
		err = sn.Commit(ctx, chainID, staged, snapshots.WithParent(parent))
	default:
		key := unpackKey(chainID)
		mounts, perr := prepareSnapshot(ctx, sn, key, parent)
		if perr != nil {
			return fmt.Errorf("prepare snapshot %s: %v", key, perr)
		}
		defer sn.Remove(cctx, key)
		upper, lowers, ok := overlayDirs(mounts)
		if !ok {
			return fmt.Errorf("%w: snapshot %s mounts as %v", errUnstaged, key, mountTypes(mounts))
		}
		if err := fixImplicitDirs(j.dir, j.implicit, lowers); err != nil {
			return fmt.Errorf("%w: %v", errUnstaged, err)
		}
		if err := exchangeDirs(j.dir, upper); err != nil {
			return fmt.Errorf("%w: %v", errUnstaged, err)
		}
		err = sn.Commit(ctx, chainID, key)
	}
	// AlreadyExists: another run (or pull) committed it first.
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("commit snapshot %s: %v", chainID, err)
	}
	return t.labelUncompressed(ctx, j.layer)
}

func unpackKey(chainID string) string {
	return fmt.Sprintf(snapshots.UnpackKeyFormat, fmt.Sprintf("%d-kiln", time.Now().UnixNano()), chainID)
}

// applyDir applies a layer above the bottom one into dir, a snapshot's
// directory that has no parent yet: containerd's archive code with the
// overlay whiteout conversion (what the applier does for an overlay mount,
// and what containerd's parallel unpack gets from bindToOverlay), the
// stream decoded in a goroutine of its own (decodedProvider) and hashed
// for the diff ID. It returns the directories the layer did not declare
// but the applier created for its entries, whose attributes come from the
// layers below once they exist (fixImplicitDirs). src is closed.
func applyDir(ctx context.Context, layer rootfs.Layer, dir string, src content.ReaderAt) ([]string, error) {
	ra, err := decodedProvider{src: src, tar: true, dir: dir}.ReaderAt(ctx, layer.Blob)
	if err != nil {
		return nil, err
	}
	defer ra.Close()
	dg := digest.Canonical.Digester()
	r := io.TeeReader(content.NewReader(ra), dg.Hash())
	rec := dirRecorder{declared: map[string]bool{}, needed: map[string]bool{}}
	if _, err := archive.Apply(ctx, dir, r, archive.WithConvertWhiteout(archive.OverlayConvertWhiteout), archive.WithFilter(rec.see)); err != nil {
		return nil, err
	}
	// What follows the tar's end marker is part of the diff ID too.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	if got := dg.Digest(); got != layer.Diff.Digest {
		return nil, wrongDiffID(layer, got)
	}
	return rec.implicit(), nil
}

// dirRecorder sees every tar header the applier reads (it never filters):
// the directories declared, and the ones entries need.
type dirRecorder struct {
	declared, needed map[string]bool
}

func (d *dirRecorder) see(h *tar.Header) (bool, error) {
	name := strings.TrimPrefix(filepath.Clean("/"+h.Name), "/")
	if h.Typeflag == tar.TypeDir {
		d.declared[name] = true
	}
	for p := filepath.Dir(name); p != "." && p != "/" && !d.needed[p]; p = filepath.Dir(p) {
		d.needed[p] = true
	}
	return true, nil
}

// implicit: needed but not declared, parents first.
func (d *dirRecorder) implicit() []string {
	var out []string
	for p := range d.needed {
		if !d.declared[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// fixImplicitDirs gives each directory of dirs under upper what
// archive.mkparent gives a directory it creates on a parent chain: owner,
// mode and (non-trusted) xattrs of the topmost lower layer that has the
// path, none if that layer holds a non-directory there (it was replaced);
// lowers are the parent chain's directories, topmost first. A directory
// reached through a symlink is left as the applier made it.
func fixImplicitDirs(upper string, dirs, lowers []string) error {
	for _, d := range dirs {
		up, err := fs.RootPath(upper, d)
		if err != nil {
			return err
		}
		if up != filepath.Join(upper, d) {
			continue
		}
		if fi, err := os.Lstat(up); err != nil || !fi.IsDir() {
			continue
		}
		for _, l := range lowers {
			lp, err := fs.RootPath(l, d)
			if err != nil {
				return err
			}
			fi, err := os.Lstat(lp)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if fi.IsDir() {
				if err := copyDirAttrs(up, lp, fi); err != nil {
					return err
				}
			}
			break
		}
	}
	return nil
}

// copyDirAttrs: archive's copyDirInfo and copyUpXAttrs without the times
// (creating the directory's entries sets its mtime to the apply's time on
// either path).
func copyDirAttrs(dst, src string, fi os.FileInfo) error {
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := os.Chmod(dst, fi.Mode()); err != nil {
		return err
	}
	keys, err := listXattrs(src)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if strings.HasPrefix(k, "trusted.") {
			continue
		}
		v, err := getXattr(src, k)
		if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
			continue
		}
		if err != nil {
			return err
		}
		if err := unix.Lsetxattr(dst, k, v, 0); err != nil {
			return fmt.Errorf("set xattr %s on %s: %v", k, dst, err)
		}
	}
	return nil
}

func listXattrs(p string) ([]string, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list xattrs of %s: %v", p, err)
		}
		var keys []string
		for _, k := range strings.Split(string(buf[:n]), "\x00") {
			if k != "" {
				keys = append(keys, k)
			}
		}
		return keys, nil
	}
}

func getXattr(p, k string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(p, k, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// exchangeDirs puts the staged layer's directory in place of upper, the
// empty upperdir containerd made for a snapshot on the parent chain: both
// are the fs directories of two snapshots of one snapshotter, so this is
// one rename on one file system. The staged directory first gets upper's
// mode and owner (containerd 1.6 gives an upperdir its parent's owner).
// RENAME_EXCHANGE leaves the empty directory in the staged snapshot, whose
// removal then finds what containerd made.
func exchangeDirs(staged, upper string) error {
	if filepath.Base(staged) != "fs" || filepath.Base(upper) != "fs" || filepath.Dir(filepath.Dir(staged)) != filepath.Dir(filepath.Dir(upper)) {
		return fmt.Errorf("%s and %s are not two snapshots of one snapshotter", staged, upper)
	}
	fi, err := os.Lstat(upper)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", upper)
	}
	ents, err := os.ReadDir(upper)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s is not empty", upper)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Lchown(staged, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := os.Chmod(staged, fi.Mode()); err != nil {
		return err
	}
	err = unix.Renameat2(unix.AT_FDCWD, staged, unix.AT_FDCWD, upper, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A file system without RENAME_EXCHANGE: replace the empty
		// directory, and give the staged snapshot an empty one back.
		if err = os.Rename(staged, upper); err == nil {
			err = os.Mkdir(staged, 0o755)
		}
	}
	if err != nil {
		return fmt.Errorf("move %s to %s: %v", staged, upper, err)
	}
	return nil
}

// upperDir is the directory a snapshot prepared without a parent writes
// to (a bind mount of it; an overlay's upperdir), when it is on this host.
func upperDir(mounts []mount.Mount) (string, bool) {
	if len(mounts) != 1 {
		return "", false
	}
	dir := ""
	switch m := mounts[0]; m.Type {
	case "bind":
		dir = m.Source
	case "overlay":
		dir, _, _ = overlayDirs(mounts)
	}
	if dir == "" {
		return "", false
	}
	fi, err := os.Stat(dir)
	return dir, err == nil && fi.IsDir()
}

// overlayDirs reads an overlay mount's upperdir and lowerdirs (topmost
// first).
func overlayDirs(mounts []mount.Mount) (upper string, lowers []string, ok bool) {
	if len(mounts) != 1 || mounts[0].Type != "overlay" {
		return "", nil, false
	}
	for _, o := range mounts[0].Options {
		if v, found := strings.CutPrefix(o, "upperdir="); found {
			upper = v
		} else if v, found := strings.CutPrefix(o, "lowerdir="); found {
			lowers = strings.Split(v, ":")
		}
	}
	return upper, lowers, upper != "" && len(lowers) > 0
}

// parentDirs returns the directories of a committed chain, topmost first,
// through a view of it (release removes the view).
func (t *Containerd) parentDirs(ctx context.Context, sn snapshots.Snapshotter, parent string) ([]string, func(), error) {
	key := fmt.Sprintf("kiln-view-%d-%s", time.Now().UnixNano(), parent)
	mounts, err := sn.View(ctx, key, parent)
	release := func() { sn.Remove(context.WithoutCancel(ctx), key) }
	if err != nil {
		release()
		return nil, nil, err
	}
	if len(mounts) == 1 && mounts[0].Type == "bind" {
		return []string{mounts[0].Source}, release, nil
	}
	for _, o := range mounts[0].Options {
		if v, ok := strings.CutPrefix(o, "lowerdir="); ok && len(mounts) == 1 && mounts[0].Type == "overlay" {
			return strings.Split(v, ":"), release, nil
		}
	}
	release()
	return nil, nil, fmt.Errorf("view of %s mounts as %v", parent, mountTypes(mounts))
}

func mountTypes(mounts []mount.Mount) []string {
	var ts []string
	for _, m := range mounts {
		ts = append(ts, m.Type)
	}
	return ts
}
