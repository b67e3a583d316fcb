package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	"golang.org/x/sys/unix"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/warm"
)

// containerd 2.x's EROFS snapshotter (plugins/snapshots/erofs) keeps each
// committed layer as one EROFS image, <root>/snapshots/<id>/layer.erofs,
// mounted read-only (file-backed, no untar) under an overlay. kiln warm
// --unpack into it writes that file itself, the way containerd's EROFS
// differ does, while the layer downloads:
//
//   - a native EROFS layer (application/vnd.erofs.layer.v1[+zstd]) is the
//     image itself: its decoded bytes are copied into the snapshot (the
//     differ's "fastcopy") and checked by fsck.erofs before the
//     snapshot the kernel mounts is committed;
//   - a tar layer is converted once by layers/erofs (mkfs.erofs with the
//     differ's flags, reproducibly, fed only what kiln's tar reader
//     accepted, the image checked by fsck.erofs), uncompressed inside as the differ
//     does; with --erofs-cache DIR (a directory of the
//     snapshotter's layer_content_caches) the image goes into that cache
//     by diff ID (containerd's CacheBlobPath layout), and the snapshotter
//     mounts it from there for this and every later image with the layer.
//
// Either way the decoded stream hashes to the config's diff ID before
// anything is committed, the snapshot is committed only after containerd
// committed (verified) the layer blob, and the snapshot carries the
// sha256 of its EROFS image and the image file's identity (labels
// below): a later warm finds a changed image (corrupted in place) by its
// identity, hashes it, and refuses to call the host ready.
const (
	// SnapshotterErofs is containerd 2.x's EROFS snapshotter.
	SnapshotterErofs = "erofs"

	// labelErofsPath, labelErofsDigest and labelErofsStamp record, on a
	// snapshot kiln committed, where its EROFS image lies, what it hashes
	// to, and the file's identity when it was hashed (blob.FileStamp).
	labelErofsPath   = "dev.kiln.erofs.path"
	labelErofsDigest = "dev.kiln.erofs.digest"
	labelErofsStamp  = "dev.kiln.erofs.stamp"

	// erofsMarker is the file the EROFS snapshotter puts in an active
	// snapshot it prepared for a differ (erofsutils.MountsToLayer).
	erofsMarker = ".erofslayer"
)

// isErofsLayer says whether mt is a native EROFS layer (plain or +zstd).
func isErofsLayer(mt string) bool {
	return layers.IsErofs(types.MediaType(mt))
}

// setHasErofsLayers says whether an image of s has a native EROFS layer:
// only the EROFS snapshotter can mount those.
func setHasErofsLayers(s *warm.Set) bool {
	for _, img := range s.Images {
		for _, l := range img.Layers {
			if isErofsLayer(l.MediaType) {
				return true
			}
		}
	}
	return false
}

// snapshotterFor is --snapshotter, or for auto: erofs when an image of s
// has native EROFS layers (only that snapshotter mounts them: an image
// as named, or the EROFS form its tag names, taken because ErofsUnpack
// said the snapshotter works), else what pickSnapshotter picks
// (overlayfs, else native).
func (t *Containerd) snapshotterFor(ctx context.Context, s *warm.Set) (string, error) {
	if !setHasErofsLayers(s) {
		return t.pickSnapshotter(ctx)
	}
	switch t.snapshotter {
	case SnapshotterErofs:
		return SnapshotterErofs, nil
	case "", "auto":
	default:
		return "", fmt.Errorf("the image has EROFS layers, which only the EROFS snapshotter mounts: --snapshotter %s cannot unpack them (leave --snapshotter auto, or warm the image's tar form, REPO:TAG rather than REPO:TAG-erofs)", t.snapshotter)
	}
	if t.ns == criNamespace {
		if sn, err := t.criSnapshotter(ctx); err == nil && sn != SnapshotterErofs {
			return "", fmt.Errorf("the image has EROFS layers, and this containerd's CRI starts pods on the %s snapshotter, which cannot mount them: warm the image's tar form (REPO:TAG rather than REPO:TAG-erofs), or set the CRI's snapshotter to erofs", sn)
		}
	}
	ok, err := t.erofsWorks(ctx)
	if err != nil {
		return "", err
	}
	if ok {
		return SnapshotterErofs, nil
	}
	return "", errors.New("the image has EROFS layers and this containerd has no working EROFS snapshotter (containerd 2.2+ and erofs-utils 1.8+; check: ctr plugins ls | grep erofs)")
}

// erofsWorks says whether the daemon's EROFS snapshotter plugin is loaded
// with no init error.
func (t *Containerd) erofsWorks(ctx context.Context) (bool, error) {
	resp, err := t.c.IntrospectionService().Plugins(t.nsCtx(ctx), `type=="io.containerd.snapshotter.v1",id=="erofs"`)
	if err != nil {
		return false, err
	}
	for _, p := range resp.Plugins {
		if p.InitErr == nil {
			return true, nil
		}
	}
	return false, nil
}

// ErofsUnpack implements warm.ErofsChecker: --unpack goes into the EROFS
// snapshotter when --snapshotter erofs names it, or with auto when the
// daemon's EROFS snapshotter works; then an image's native EROFS form
// (REPO:TAG-erofs, when REPO:TAG names it) is worth taking, and auto
// picks erofs for it (snapshotterFor). Any other --snapshotter never
// takes it. In the kubelet's namespace auto takes it only when the CRI
// runs pods on the EROFS snapshotter (criSnapshotter): an image record
// of EROFS layers under an overlayfs CRI would not start.
func (t *Containerd) ErofsUnpack(ctx context.Context) bool {
	switch t.snapshotter {
	case SnapshotterErofs:
		return true
	case "", "auto":
		if t.ns == criNamespace {
			if sn, err := t.criSnapshotter(ctx); err != nil || sn != SnapshotterErofs {
				return false
			}
		}
		ok, err := t.erofsWorks(ctx)
		return ok && err == nil
	}
	return false
}

// unpackErofs applies the layers into the EROFS snapshotter one at a
// time, each on its committed parent (an EROFS snapshot's Prepare wants
// its parent committed); the bytes are written while they download.
func (t *Containerd) unpackErofs(ctx context.Context, layers []rootfs.Layer, sn snapshots.Snapshotter, ready warm.Readiness) error {
	var chain []digest.Digest
	for _, layer := range layers {
		tr := t.traceStart(layer)
		how, err := t.erofsLayer(ctx, layer, chain, sn, ready, tr)
		if err != nil {
			return fmt.Errorf("layer %s: %v", layer.Blob.Digest, err)
		}
		t.traceDone(tr, how, false)
		chain = append(chain, layer.Diff.Digest)
	}
	return nil
}

// erofsLayer makes one layer's EROFS snapshot (or checks the one there)
// and returns how (a how* constant): from the growing ingest, else from
// the committed blob file (also when the stream failed), else by
// containerd's own EROFS differ (a containerd on another host).
func (t *Containerd) erofsLayer(ctx context.Context, layer rootfs.Layer, chain []digest.Digest, sn snapshots.Snapshotter, ready warm.Readiness, tr *warm.LayerTrace) (string, error) {
	chainID := identity.ChainID(append(slices.Clone(chain), layer.Diff.Digest)).String()
	if info, err := sn.Stat(ctx, chainID); err == nil {
		return warm.HowPresent, checkErofsSnapshot(ctx, sn, info)
	}
	var src content.ReaderAt
	var how string
	if linkable(layer) {
		// Its image is its blob: linked once containerd has committed it
		// (linkErofs), which is sooner than a copy written while it
		// downloads could be done.
		if err := ready.Wait(ctx, layer.Blob.Digest); err != nil {
			return "", err
		}
		src, how = t.blobFile(layer.Blob)
	}
	if src == nil {
		var err error
		if src, how, err = t.layerSource(ctx, layer.Blob, ready); err != nil {
			return "", err
		}
	}
	t.traceMark(&tr.Start)
	var err error
	if src != nil {
		err = t.erofsApply(ctx, layer, chain, sn, src, ready, tr)
		if err != nil && how == warm.HowStreamed && ctx.Err() == nil {
			// The stream failed (a write that stopped, say): the
			// committed blob file is read next.
			t.inprocFailures.Add(1)
			t.noteFallback(err)
			if err := ready.Wait(ctx, layer.Blob.Digest); err != nil {
				return "", err
			}
			if src, how = t.blobFile(layer.Blob); src != nil {
				err = t.erofsApply(ctx, layer, chain, sn, src, ready, tr)
			}
		}
		if src != nil {
			if err != nil {
				return "", err
			}
			t.countHow(how)
			return how, t.labelUncompressed(ctx, layer)
		}
	}
	// containerd's content root is not on this host: its own EROFS
	// differ converts (or copies) the layer.
	if err := ready.Wait(ctx, layer.Blob.Digest); err != nil {
		return "", err
	}
	t.traceMark(&tr.Verified)
	if _, err := rootfs.ApplyLayerWithOpts(ctx, layer, chain, sn, t.c.DiffService(), nil, nil); err != nil {
		return "", err
	}
	t.traceMark(&tr.Applied)
	return warm.HowDaemon, t.labelUncompressed(ctx, layer)
}

// erofsApply prepares the layer's snapshot on its parent chain, writes its
// EROFS image from src (into the snapshot, or into the layer content
// cache that the snapshot then mounts from), waits for containerd to have
// committed the blob, and commits the snapshot under its chain ID with
// the image's path and sha256. Nothing is left behind when it fails. src
// is closed.
func (t *Containerd) erofsApply(ctx context.Context, layer rootfs.Layer, chain []digest.Digest, sn snapshots.Snapshotter, src content.ReaderAt, ready warm.Readiness, tr *warm.LayerTrace) error {
	chainID := identity.ChainID(append(slices.Clone(chain), layer.Diff.Digest)).String()
	parent := ""
	if len(chain) > 0 {
		parent = identity.ChainID(chain).String()
	}
	var cached string
	if t.erofsCache != "" && !isErofsLayer(layer.Blob.MediaType) {
		cached = erofsCacheBlobPath(t.erofsCache, layer.Diff.Digest)
		if err := fillErofsCache(ctx, layer, src, cached); err != nil {
			return fmt.Errorf("--erofs-cache %s: %v", t.erofsCache, err)
		}
		src = nil
	}
	key := unpackKey(chainID)
	// Cleanup must run even when the warm was cancelled.
	cctx := context.WithoutCancel(ctx)
	// The unpacker's labels: with them the snapshotter serves the layer
	// from its layer content cache when the diff ID is there.
	mounts, err := prepareSnapshot(ctx, sn, key, parent, snapshots.WithLabels(map[string]string{
		snapshots.LabelSnapshotRef:    chainID,
		snapshots.LabelSnapshotDiffID: layer.Diff.Digest.String(),
	}))
	if err != nil {
		if src != nil {
			src.Close()
		}
		return fmt.Errorf("prepare snapshot %s: %v", key, err)
	}
	var path string
	var sum digest.Digest
	switch {
	case len(mounts) > 0 && mounts[len(mounts)-1].ReadOnly():
		// Populated from the layer content cache: nothing to write.
		if src != nil {
			src.Close()
		}
		path = cached
		if path == "" {
			err = fmt.Errorf("the EROFS snapshotter served layer %s from a layer content cache: pass that directory as --erofs-cache", layer.Diff.Digest)
		} else {
			sum, err = hashFile(path)
		}
	case src == nil:
		err = fmt.Errorf("layer %s is in --erofs-cache %s, but the EROFS snapshotter did not use it: is the directory in its layer_content_caches?", layer.Diff.Digest, t.erofsCache)
	default:
		path, sum, err = writeErofsLayer(ctx, layer, mounts, src, !t.noLink.Load())
	}
	if err == nil {
		t.traceMark(&tr.Applied)
		err = ready.Wait(ctx, layer.Blob.Digest)
	}
	if err == nil {
		t.traceMark(&tr.Verified)
		err = sn.Commit(ctx, chainID, key, snapshots.WithLabels(map[string]string{
			labelErofsPath:   path,
			labelErofsDigest: sum.String(),
		}))
		if err == nil {
			// A snapshotter with set_immutable marks the image immutable
			// at commit: a linked image is the content store's blob file,
			// which containerd's GC could then not remove while the
			// snapshot lives. The rest of the layers are copied.
			if immutable(path) {
				t.noLink.Store(true)
			}
			// Stamped after the commit, which may enable fs-verity on
			// the file (a change of its ctime).
			return stampErofs(ctx, sn, chainID, path)
		}
		if errdefs.IsAlreadyExists(err) {
			// Another warm (or pull) committed it first.
			sn.Remove(cctx, key)
			return nil
		}
		err = fmt.Errorf("commit snapshot %s: %v", chainID, err)
	}
	if rerr := sn.Remove(cctx, key); rerr != nil && !errdefs.IsNotFound(rerr) {
		err = fmt.Errorf("%v; removing snapshot %s: %v", err, key, rerr)
	}
	return err
}

// erofsLayerDir is the directory of the active EROFS snapshot mounts
// describe (the one holding layer.erofs), as containerd's EROFS differ
// finds it: the parent of the bind source or of the overlay's upperdir,
// marked by .erofslayer.
func erofsLayerDir(mounts []mount.Mount) (string, error) {
	if len(mounts) == 0 {
		return "", errors.New("the EROFS snapshotter returned no mounts")
	}
	m := mounts[len(mounts)-1]
	var dir string
	switch typ := m.Type[strings.LastIndex(m.Type, "/")+1:]; typ {
	case "bind", "erofs":
		dir = filepath.Dir(m.Source)
	case "overlay":
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				dir = filepath.Dir(v)
			}
		}
	}
	if dir == "" {
		return "", fmt.Errorf("no EROFS layer directory in a %s mount", m.Type)
	}
	if _, err := os.Stat(filepath.Join(dir, erofsMarker)); err != nil {
		return "", fmt.Errorf("%s is not a snapshot of the EROFS snapshotter (no %s): is it this host's containerd?", dir, erofsMarker)
	}
	return dir, nil
}

// writeErofsLayer writes the layer read from src as the snapshot's
// layer.erofs (atomically: a temporary file, synced, renamed) and checks
// the decoded stream's diff ID. src is closed. It returns the path and
// the image's sha256.
func writeErofsLayer(ctx context.Context, layer rootfs.Layer, mounts []mount.Mount, src content.ReaderAt, link bool) (string, digest.Digest, error) {
	dir, err := erofsLayerDir(mounts)
	if err != nil {
		src.Close()
		return "", "", err
	}
	path := filepath.Join(dir, "layer.erofs")
	sum, err := buildErofs(ctx, layer, src, path, link)
	return path, sum, err
}

// buildErofs puts the layer's EROFS image at path through a temporary
// file beside it: the committed blob linked (linkErofs, when link), else
// written from src (writeErofs); a native image is checked by fsck.erofs
// either way. It returns the image's sha256. src is closed.
func buildErofs(ctx context.Context, layer rootfs.Layer, src content.ReaderAt, path string, link bool) (digest.Digest, error) {
	tmp := ""
	if link {
		tmp = linkErofs(layer, src, filepath.Dir(path))
	}
	if tmp == "" {
		var err error
		if tmp, err = writeErofs(ctx, layer, src, path); err != nil {
			return "", err
		}
	}
	defer os.Remove(tmp)
	native := isErofsLayer(layer.Blob.MediaType)
	if native {
		// A converted image was checked by ConvertFile; a native one's
		// digest says only that it is the blob the image names.
		if err := erofs.Fsck(ctx, tmp); err != nil {
			return "", err
		}
	}
	// A native layer's image is its decoded stream: hashed already.
	sum := layer.Diff.Digest
	if !native {
		var err error
		if sum, err = hashFile(tmp); err != nil {
			return "", err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	return sum, atomicfile.SyncDir(filepath.Dir(path))
}

// writeErofs decodes src, checks it hashes to the layer's diff ID, and
// writes the layer's EROFS image (a native layer's own bytes, a tar layer
// converted by mkfs.erofs) to a temporary file beside path, which it
// returns (removed on an error). src is closed.
func writeErofs(ctx context.Context, layer rootfs.Layer, src content.ReaderAt, path string) (string, error) {
	ra, err := decodedProvider{src: src}.ReaderAt(ctx, layer.Blob)
	if err != nil {
		return "", err
	}
	defer ra.Close()
	diff := digest.SHA256.Digester()
	in := io.TeeReader(content.NewReader(ra), diff.Hash())
	// A name of its own: two warms may fill one cache entry at once.
	f, err := os.CreateTemp(filepath.Dir(path), ".kiln-*.erofs")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = f.Chmod(0o644)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if isErofsLayer(layer.Blob.MediaType) {
			err = copyToFile(tmp, in)
		} else {
			// Uncompressed inside, as containerd's differ converts: the
			// conversion spends no CPU on compression, and reads none on
			// decompression.
			h, _ := v1.NewHash(layer.Diff.Digest.String())
			err = erofs.ConvertFile(ctx, in, tmp, erofs.WithCompression(erofs.None), erofs.WithDiffID(h), erofs.WithTempDir(filepath.Dir(path)),
				erofs.WithMaxSize(maxTar(ra, layer.Blob.Size)))
		}
	}
	if got := diff.Digest(); err == nil && got != layer.Diff.Digest {
		err = wrongDiffID(layer, got)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// linkErofs hard-links the committed blob file src into dir as a
// temporary file and returns its path, when the layer is a native EROFS
// image stored as it is (its diff ID is its blob digest): containerd
// verified that digest over every byte when it committed the blob, so the
// file is the image the config names, and linking it costs neither a copy
// nor a hash of the bytes (on this host a 886 MiB layer took 3 s to copy,
// hash and sync). buildErofs checks it with fsck.erofs as it does a copy.
// "" (nothing done) when src is not a committed blob file or the link
// cannot be made (another filesystem): the caller copies. src is closed
// when linked.
func linkErofs(layer rootfs.Layer, src content.ReaderAt, dir string) string {
	f, isFile := src.(sizedFile)
	if !isFile || !linkable(layer) {
		return ""
	}
	tmp := filepath.Join(dir, ".kiln-link-"+layer.Blob.Digest.Encoded()[:16]+".erofs")
	os.Remove(tmp)
	if err := os.Link(f.Name(), tmp); err != nil {
		return ""
	}
	src.Close()
	return tmp
}

// immutable says whether the file at path has the immutable attribute
// (chattr +i).
func immutable(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	const fsImmutableFL = 0x00000010 // FS_IMMUTABLE_FL, linux/fs.h
	return err == nil && flags&fsImmutableFL != 0
}

// linkable says whether layer's EROFS image is its blob as stored: a
// native EROFS layer whose diff ID is its blob digest.
func linkable(layer rootfs.Layer) bool {
	return isErofsLayer(layer.Blob.MediaType) && layer.Diff.Digest == layer.Blob.Digest
}

// maxTar is the most the tar decoded by ra can be: layers.MaxDecoded of
// its blob of size bytes, in the compression its bytes are in.
func maxTar(ra content.ReaderAt, size int64) int64 {
	d, ok := ra.(*decodedReaderAt)
	if !ok || size <= 0 {
		return erofs.MaxSize
	}
	c := layers.Zstd // the largest ratio, for an encoding kiln does not name
	switch d.rc.GetCompression() {
	case compression.Uncompressed:
		c = layers.Uncompressed
	case compression.Gzip:
		c = layers.Gzip
	}
	return layers.MaxDecoded(c, size)
}

func copyToFile(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_TRUNC|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func hashFile(path string) (digest.Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return digest.SHA256.FromReader(f)
}

// erofsCacheBlobPath is containerd's layer content cache layout
// (erofsutils.CacheBlobPath, an internal package):
// <dir>/<algo>/<first two hex digits>/<hex>.erofs.
func erofsCacheBlobPath(dir string, diffID digest.Digest) string {
	enc := diffID.Encoded()
	return filepath.Join(dir, diffID.Algorithm().String(), enc[:2], enc+".erofs")
}

// fillErofsCache converts a tar layer read from src into the layer
// content cache at path (its diff ID's entry), unless it is there
// already. src is closed.
func fillErofsCache(ctx context.Context, layer rootfs.Layer, src content.ReaderAt, path string) error {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		src.Close()
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		src.Close()
		return err
	}
	_, err := buildErofs(ctx, layer, src, path, false)
	return err
}

// checkErofsSnapshot is the readiness gate for an EROFS snapshot kiln
// committed earlier: its image must still hash to what was recorded. An
// unchanged file (same identity) is trusted; any other is hashed again.
// A snapshot kiln did not make (containerd's own pull) records nothing.
func checkErofsSnapshot(ctx context.Context, sn snapshots.Snapshotter, info snapshots.Info) error {
	path, want := info.Labels[labelErofsPath], info.Labels[labelErofsDigest]
	if path == "" || want == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("snapshot %s: its EROFS image is gone: %v", info.Name, err)
	}
	if blob.FileStamp(fi) == info.Labels[labelErofsStamp] {
		return nil
	}
	got, err := hashFile(path)
	if err != nil {
		return fmt.Errorf("snapshot %s: %v", info.Name, err)
	}
	if got.String() != want {
		return fmt.Errorf("snapshot %s: its EROFS image %s is corrupted (it hashes to %s, committed as %s): remove the image and its snapshots (ctr images rm; ctr snapshots --snapshotter erofs rm) and warm again",
			info.Name, path, got, want)
	}
	return stampErofs(ctx, sn, info.Name, path)
}

// stampErofs records the identity of the EROFS image of snapshot name,
// just hashed: a later warm trusts it while it is unchanged. A failure
// only costs a hash next time.
func stampErofs(ctx context.Context, sn snapshots.Snapshotter, name, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	_, err = sn.Update(ctx, snapshots.Info{Name: name, Labels: map[string]string{labelErofsStamp: blob.FileStamp(fi)}}, "labels."+labelErofsStamp)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("labels on snapshot %s: %v", name, err)
	}
	return nil
}
