package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

// Ingest modes for the containerd target (Options.Ingest).
const (
	// IngestAuto writes ingests directly when containerd's content root is
	// on this host and writable, else through the gRPC content API.
	IngestAuto = "auto"
	// IngestDirect requires the direct path (an error when it is not
	// possible).
	IngestDirect = "direct"
	// IngestGRPC always streams bytes through containerd's content API.
	IngestGRPC = "grpc"
)

// The direct ingest path: why it is safe.
//
// containerd's gRPC Write stream carries every byte of a blob through one
// stream and one daemon goroutine; on a 2-core host that caps an ingest at
// ~150-170 MB/s, well under the loopback and sha256 limits. When the daemon
// is on this host, kiln keeps containerd in charge of every decision and
// takes only the byte copy out of the stream:
//
//  1. Open the writer through the content API with the named ref and the
//     blob's descriptor. containerd's metadata store creates the ingest
//     (bound to the namespace and the warm's lease) and its local store
//     creates ingest/<sha256(backing ref)>/{ref,startedat,updatedat,total,data},
//     where the backing ref is "<namespace>/<sequence>/<ref>"
//     (metadata/content.go; createKey in metadata/snapshot.go). Status().Offset is what an earlier
//     run left. The writer is closed again at once, so nothing of
//     containerd's holds a file offset into data.
//  2. kiln appends the missing bytes to data itself, in order (so the file
//     is always a prefix of the blob and a killed run resumes from its size,
//     exactly as on the gRPC path), under a flock against a second kiln.
//  3. kiln opens the writer again. containerd's local store finds the
//     ingest directory and resumes it: resumeStatus reads the whole data
//     file through a fresh digester to compute the offset and the digest
//     (content/local/store.go in containerd 1.6: store.writer →
//     store.resumeStatus, "io.CopyBuffer(digester.Hash(), fp, ...)").
//  4. Commit(size, expected digest): containerd's writer.Commit
//     (content/local/writer.go) fsyncs the data, compares the file's size
//     and the digest it computed in step 3 with the expected ones and
//     refuses (FailedPrecondition) on a mismatch; only then is the file
//     renamed into blobs/sha256/. containerd, not kiln, verified the blob.
//
// The direct path is taken only after checking, per blob, that the ingest
// containerd just created is visible here with our ref in its ref file:
// a remote socket, another mount namespace or a read-only root fall back
// to the gRPC path.

// ingestDir finds the directory containerd's local store uses for the
// namespaced ingest ref: its ref file holds "<ns>/<n>/<ref>".
func ingestDir(root, ns, ref string) (string, error) {
	want := regexp.MustCompile("^" + regexp.QuoteMeta(ns) + "/[0-9]+/" + regexp.QuoteMeta(ref) + "$")
	ents, err := os.ReadDir(filepath.Join(root, "ingest"))
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, "ingest", e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "ref"))
		if err != nil {
			continue
		}
		if want.Match(b) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no ingest for %s under %s", ref, filepath.Join(root, "ingest"))
}

// contentDirName is the local content store's directory under a
// containerd root.
const contentDirName = "io.containerd.content.v1.content"

// contentRootFor resolves --containerd-root: the daemon's root (which holds
// io.containerd.content.v1.content) or the content store's own directory.
// containerd 1.6 creates ingest/ when the store opens; 2.x creates ingest/
// and blobs/ only at the first write, so a fresh 2.x store is recognized by
// its directory name.
func contentRootFor(dir string) (string, error) {
	for _, c := range []string{dir, filepath.Join(dir, contentDirName)} {
		if isDir(filepath.Join(c, "ingest")) || isDir(filepath.Join(c, "blobs")) ||
			(filepath.Base(c) == contentDirName && isDir(c)) {
			return c, nil
		}
	}
	return "", fmt.Errorf("--containerd-root %s: neither it nor %s holds containerd's content store (an ingest directory)", dir, filepath.Join(dir, contentDirName))
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// writableDir says why kiln cannot write ingests under root ("" when it
// can). Before containerd 2.x's first write there is no ingest/ yet; the
// root itself must then be writable (containerd creates ingest/ when kiln
// opens the first writer, and each blob's ingest is checked to appear).
func writableDir(root string) string {
	p := filepath.Join(root, "ingest")
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		p = root
	}
	if err := unix.Access(p, unix.R_OK|unix.W_OK|unix.X_OK); err != nil {
		return fmt.Sprintf("%s: %v", p, err)
	}
	return ""
}

// directWriter appends a blob's bytes to containerd's ingest data file.
type directWriter struct {
	t   *Containerd
	d   ocispec.Descriptor
	ref string
	f   *os.File
	off int64
	// flushed: bytes below it have had their writeback started.
	flushed int64
	// li lets the pipelined unpack read the bytes as they land.
	li *liveIngest
	// ctx is the Writer call's; early carries the writer opened half-way
	// (see startEarly), earlyDone whether it was taken.
	ctx       context.Context
	early     chan earlyOpen
	earlyDone bool
}

type earlyOpen struct {
	w   content.Writer
	err error
}

// earlyMin: blobs this large have their verification overlapped with
// their download (a variable for tests).
var earlyMin int64 = 64 << 20

// startEarly opens containerd's writer for the ingest while kiln is still
// appending to it. Opening makes containerd hash the data file from its
// start (resumeStatus) and read until it finds the end of the file; while
// the download is faster than containerd's sha256 it finds the end only
// after the last byte, so verifying overlaps the second half of the
// download instead of following it. Whether it did is plain afterwards:
// the writer's offset is the bytes containerd hashed. If it caught up
// early, Commit closes it and opens a fresh writer (a full re-read), so
// the result is the same as without this; containerd verifies either way.
func (w *directWriter) startEarly() {
	w.early = make(chan earlyOpen, 1)
	go func() {
		cw, err := content.OpenWriter(w.t.nsCtx(w.ctx), w.t.cs, content.WithRef(w.ref), content.WithDescriptor(w.d))
		w.early <- earlyOpen{cw, err}
	}()
}

// takeEarly returns the early writer when containerd hashed every byte of
// the blob through it (ok); otherwise it is closed.
func (w *directWriter) takeEarly() (content.Writer, bool, error) {
	if w.early == nil || w.earlyDone {
		return nil, false, nil
	}
	w.earlyDone = true
	r := <-w.early
	if errdefs.IsAlreadyExists(r.err) {
		return nil, false, blob.ErrAlreadyExists
	}
	if r.err != nil {
		return nil, false, nil
	}
	st, err := r.w.Status()
	if err != nil || st.Offset != w.d.Size {
		r.w.Close()
		w.t.earlyMisses.Add(1)
		return nil, false, nil
	}
	w.t.earlyHits.Add(1)
	return r.w, true, nil
}

func (w *directWriter) dropEarly() {
	if w.early == nil || w.earlyDone {
		return
	}
	w.earlyDone = true
	if r := <-w.early; r.err == nil {
		r.w.Close()
	}
}

// settle tells readers of the live ingest how the writer ended.
func (w *directWriter) settle(err error) {
	w.li.finish(err)
	w.t.live.unregister(w.d.Digest, w.li)
}

// errIngestMoved: the ingest's data file was committed or removed while
// openDirect waited for its lock.
var errIngestMoved = errors.New("ingest moved while waiting for its lock")

// ingestOnDisk says whether ingest ref has a data file in the content
// root (a direct writer's, or one it left).
func (t *Containerd) ingestOnDisk(ref string) bool {
	dir, err := ingestDir(t.root, t.ns, ref)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "data"))
	return err == nil
}

// openDirect is step 2: the ingest exists (step 1 opened and closed it);
// take the file, locked, at its end.
func (t *Containerd) openDirect(ctx context.Context, d ocispec.Descriptor, ref string) (*directWriter, error) {
	dir, err := ingestDir(t.root, t.ns, ref)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "data"), os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	// Another run writing the same blob: wait for it. By then containerd
	// may have committed (moved) the file or dropped the ingest; the
	// caller starts over and learns which.
	if err := atomicfile.LockFile(ctx, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("ingest %s: waiting for another writer: %v", ref, err)
	}
	held, err1 := f.Stat()
	now, err2 := os.Stat(f.Name())
	if err1 != nil || err2 != nil || !os.SameFile(held, now) {
		f.Close()
		return nil, errIngestMoved
	}
	off, err := f.Seek(0, 2)
	if err != nil {
		f.Close()
		return nil, err
	}
	rf, err := os.Open(f.Name())
	if err != nil {
		f.Close()
		return nil, err
	}
	li := newLiveIngest(rf, off, d.Size)
	t.live.register(d.Digest, li)
	return &directWriter{t: t, d: d, ref: ref, f: f, off: off, flushed: off, li: li, ctx: ctx}, nil
}

func (w *directWriter) Offset() int64 { return w.off }

func (w *directWriter) Write(p []byte) (int, error) {
	if w.off+int64(len(p)) > w.d.Size {
		return 0, fmt.Errorf("blob %s: %w: more than the %d bytes its descriptor names", w.d.Digest, registry.ErrSizeMismatch, w.d.Size)
	}
	n, err := w.f.Write(p)
	w.off += int64(n)
	w.li.advance(w.off)
	if w.early == nil && w.d.Size >= earlyMin && w.off >= w.d.Size/2 {
		w.startEarly()
	}
	if w.off-w.flushed >= writebackStep {
		// containerd fsyncs the data file at Commit, and a fresh blob's
		// dirty pages sit in the page cache until then (far below the
		// background writeback threshold): the whole blob would go to
		// disk only after the download and the re-hash. Starting the
		// writeback of each step as it is written lets the disk work
		// while the network does, so the fsync finds little left.
		// SYNC_FILE_RANGE_WRITE only queues the I/O; errors surface at
		// containerd's fsync.
		_ = unix.SyncFileRange(int(w.f.Fd()), w.flushed, w.off-w.flushed, unix.SYNC_FILE_RANGE_WRITE)
		w.flushed = w.off
	}
	return n, err
}

// writebackStep is how many written bytes start a writeback.
const writebackStep = 8 << 20

// Commit is steps 3 and 4: containerd re-reads and hashes the data file,
// then verifies size and digest.
func (w *directWriter) Commit(ctx context.Context) (err error) {
	defer w.f.Close()
	defer func() {
		if err != nil && !errors.Is(err, blob.ErrAlreadyExists) {
			w.settle(err)
		} else {
			w.settle(nil)
		}
	}()
	if cw, ok, err := w.takeEarly(); err != nil {
		return err
	} else if ok {
		// containerd hashed the file while it grew and reached its end
		// after the last byte: commit on that writer.
		err := (&ctrWriter{t: w.t, w: cw, d: w.d, ref: w.ref, off: w.d.Size}).Commit(ctx)
		if err == nil || !errors.Is(err, registry.ErrDigestMismatch) {
			return err
		}
		// Refused: verify once more from a fresh open (a full re-read
		// from the file) before calling the blob corrupt.
	}
	cctx := w.t.nsCtx(ctx)
	cw, err := content.OpenWriter(cctx, w.t.cs, content.WithRef(w.ref), content.WithDescriptor(w.d))
	if errdefs.IsAlreadyExists(err) {
		return blob.ErrAlreadyExists
	}
	if err != nil {
		return fmt.Errorf("target %s: ingest %s: %v", w.t, w.ref, err)
	}
	st, err := cw.Status()
	if err != nil {
		cw.Close()
		return fmt.Errorf("target %s: ingest %s: %v", w.t, w.ref, err)
	}
	if st.Offset != w.d.Size {
		cw.Close()
		return fmt.Errorf("blob %s: %w: containerd's ingest holds %d bytes, want %d", w.d.Digest, registry.ErrSizeMismatch, st.Offset, w.d.Size)
	}
	return (&ctrWriter{t: w.t, w: cw, d: w.d, ref: w.ref, off: st.Offset}).Commit(ctx)
}

func (w *directWriter) Close() error {
	w.dropEarly()
	w.settle(errIngestStopped)
	return w.f.Close()
}

// Abort removes the ingest while still holding its data file's lock, so a
// writer waiting for it never takes over a file about to vanish.
func (w *directWriter) Abort(ctx context.Context) error {
	w.dropEarly()
	w.settle(errIngestStopped)
	defer w.f.Close()
	return w.t.abortIngest(ctx, w.d, w.ref)
}

// abortIngest removes ingest ref holding the daemon's writer of it. The
// writer Writer opened and closed (a close only half-closes its stream)
// may still be writing the ingest's timestamp file until the daemon lets
// the ref go; a removal racing it failed with "directory not empty".
func (t *Containerd) abortIngest(ctx context.Context, d ocispec.Descriptor, ref string) error {
	ctx = t.nsCtx(ctx)
	cw, err := content.OpenWriter(ctx, t.cs, content.WithRef(ref), content.WithDescriptor(d))
	if errdefs.IsAlreadyExists(err) {
		return nil // committed meanwhile: nothing to discard
	}
	if err != nil {
		return fmt.Errorf("target %s: abort %s: %v", t, ref, err)
	}
	defer cw.Close()
	err = t.cs.Abort(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// directFallback records why the direct path is off, once.
func (t *Containerd) directFallback(why error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.root != "" && t.ingest != IngestDirect {
		t.root = ""
		t.directWhy = why.Error()
	}
}

// isNotLocalIngest tells the errors that mean "this host does not see the
// daemon's ingest" from real write errors.
func isNotLocalIngest(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) || strings.HasPrefix(err.Error(), "no ingest for")
}
