package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/registry"
)

// RangesSuffix names a chunked partial's record of the bytes on disk.
const RangesSuffix = ".ranges"

// MinChunks: a blob of fewer chunks is fetched on one connection, where a
// ranges record and a follower hasher would cost more than they save.
const MinChunks = 4

// Dir is a directory of verified blobs and of the partial files that
// become them: kiln warm's OCI layout cache (Root = DIR/blobs/sha256) and
// a weights volume's staging area (.kiln-partial) are both one.
//
//   - A committed blob is Root/<hex>: it got there by rename, after its
//     size and sha256 were checked and its bytes made durable.
//   - A partial is Partial/<hex><Suffix>, locked (flock) by its one writer
//     across processes; a second writer of the blob waits its turn, then
//     finds the blob committed or resumes what is left.
//   - A partial written in parallel chunks has a ranges record beside it;
//     a later writer fetches only the complement.
//   - Partial/verified/<hex> records the identity of a committed file kiln
//     verified (device, inode, size, mtime, ctime): Has trusts an unchanged
//     file and hashes any other, so a corrupted or foreign blob is missing.
type Dir struct {
	Root    string
	Partial string
	Suffix  string
	Sync    SyncMode
	// Stamps keeps the verified records (a long-lived cache); without
	// it Has hashes every committed file it is asked about.
	Stamps bool
	// Staging says the committed blobs are renamed again, and that rename
	// made durable, by the caller (a weights volume's .kiln-partial): the
	// directory is not synced after each commit. A crash may then lose a
	// commit, never corrupt one (the file was synced before its rename,
	// and a staging blob is hashed again before it is used).
	Staging bool
}

// Path is where the committed blob dg lies.
func (d Dir) Path(dg v1.Hash) string { return filepath.Join(d.Root, dg.Hex) }

// PartialPath is where dg is written until it is committed.
func (d Dir) PartialPath(dg v1.Hash) string { return filepath.Join(d.Partial, dg.Hex+d.Suffix) }

func (d Dir) stampPath(dg v1.Hash) string { return filepath.Join(d.Partial, "verified", dg.Hex) }

// Held is how many bytes of blob dg (size bytes) the directory holds: size
// when a file of that size is committed, else what an earlier writer's
// partial holds (for a preflight of the space still needed; Has, not
// Held, says whether the blob verifies).
func (d Dir) Held(dg v1.Hash, size int64) int64 {
	if fi, err := os.Stat(d.Path(dg)); err == nil && fi.Size() == size {
		return size
	}
	if fi, err := os.Stat(d.PartialPath(dg)); err == nil {
		return min(fi.Size(), size)
	}
	return 0
}

// Remove deletes blob dg: its committed file, its partial, the partial's
// ranges record and the verified record. A file that is not there is not
// an error.
func (d Dir) Remove(dg v1.Hash) error {
	for _, p := range []string{d.Path(dg), d.PartialPath(dg), d.PartialPath(dg) + RangesSuffix, d.stampPath(dg)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Empty says whether the directory holds no blob: no committed file, no
// partial and no verified record. Names in Partial listed in own are the
// caller's own bookkeeping (a lock file), not someone's bytes.
func (d Dir) Empty(own ...string) (bool, error) {
	for _, dir := range []string{d.Root, d.Partial, filepath.Dir(d.stampPath(v1.Hash{}))} {
		es, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		for _, e := range es {
			if dir != d.Partial || (e.Name() != "verified" && !slices.Contains(own, e.Name())) {
				return false, nil
			}
		}
	}
	return true, nil
}

// Has says whether blob dg of size bytes is committed and its bytes hash
// to dg (checked once per file, then trusted while the file is unchanged).
func (d Dir) Has(ctx context.Context, dg v1.Hash, size int64) (bool, error) {
	if err := CheckDigest(dg); err != nil {
		return false, err
	}
	p := d.Path(dg)
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != size {
		return false, nil
	}
	if !d.Stamps {
	} else if b, err := os.ReadFile(d.stampPath(dg)); err == nil && string(b) == FileStamp(fi) {
		return true, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	vr, err := registry.NewVerifyReader(f, dg, size)
	if err != nil {
		return false, err
	}
	if err := vr.Drain(); err != nil {
		if registry.IsIntegrityError(err) {
			return false, nil
		}
		return false, fmt.Errorf("verifying blob %s: %v", dg, err)
	}
	// Stamp what was hashed (the open file), not whatever the path names now.
	if fi, err := f.Stat(); err == nil {
		d.stamp(dg, fi)
	}
	return true, nil
}

// stamp records that the file fi describes was verified as dg. A failure
// only costs a hash on the next run.
func (d Dir) stamp(dg v1.Hash, fi os.FileInfo) {
	if !d.Stamps {
		return
	}
	p := d.stampPath(dg)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
		_ = atomicfile.WriteFile(p, []byte(FileStamp(fi)), 0o644)
	}
}

// FileStamp is a file's identity and its last change: rewriting the file
// or its bytes changes ctime, which no user-level tool can set back.
func FileStamp(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("v1 %d %d %d %d.%09d %d.%09d\n", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

// Writer opens blob dg's partial, waiting for another writer of it, and
// returns ErrAlreadyExists when the blob is committed (perhaps by the
// writer it waited for). Offset says what an earlier writer left.
func (d Dir) Writer(ctx context.Context, dg v1.Hash, size int64) (*FileWriter, error) {
	if err := CheckDigest(dg); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("blob %s: negative size %d", dg, size)
	}
	for _, dir := range []string{d.Root, d.Partial} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("blob %s: %v", dg, err)
		}
	}
	f, p, created, err := d.lockPartial(ctx, dg)
	if err != nil {
		return nil, err
	}
	if ok, err := d.Has(ctx, dg, size); err != nil || ok {
		if err == nil {
			os.Remove(p)
			os.Remove(RangesPath(p))
			err = ErrAlreadyExists
		}
		f.Close()
		return nil, err
	}
	w := &FileWriter{d: d, dg: dg, size: size, f: f, path: p, created: created}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if done, ok := ReadRanges(p, size); ok {
		w.chunked, w.done = true, done
		w.n, w.resumed = done.PrefixEnd(0), done.Bytes()
		return w, nil
	}
	os.Remove(RangesPath(p)) // a record for another size
	w.n = st.Size()
	if w.n > size {
		// Longer than the blob (F1): nothing of it can be trusted.
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
		w.n = 0
	}
	w.resumed = w.n
	return w, nil
}

// lockPartial opens dg's partial file and locks it. The file it waited on
// may have been committed (renamed) or aborted (removed) meanwhile: then
// the lock is on a file no longer at the partial path, and it opens that
// path again.
func (d Dir) lockPartial(ctx context.Context, dg v1.Hash) (*os.File, string, bool, error) {
	p := d.PartialPath(dg)
	for {
		_, serr := os.Lstat(p)
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, "", false, fmt.Errorf("blob %s: %v", dg, err)
		}
		if err := atomicfile.LockFile(ctx, f); err != nil {
			f.Close()
			return nil, "", false, fmt.Errorf("blob %s: waiting for another writer: %v", dg, err)
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(p)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, p, errors.Is(serr, os.ErrNotExist), nil
		}
		f.Close()
		if err1 != nil {
			return nil, "", false, fmt.Errorf("blob %s: %v", dg, err1)
		}
	}
}

// FileWriter writes one blob of a Dir, either as one stream (Write) or in
// parallel Range chunks (Fill). Commit verifies size and digest before the
// blob becomes visible; Close keeps the bytes for a later writer; Abort
// discards them.
type FileWriter struct {
	d       Dir
	dg      v1.Hash
	size    int64
	f       *os.File
	path    string
	created bool

	n       int64     // stream: bytes [0, n) kept
	h       hash.Hash // stream: nil until the stream starts
	chunked bool      // written in chunks: done and the record say what is on disk
	done    Ranges
	sum     string // chunked: the digest once every byte was hashed
	resumed int64
	closed  bool
	follow  io.Writer // receives the bytes hashed, in order (nil: none)
}

var _ Writer = (*FileWriter)(nil)

// Follow makes f receive every byte of the blob in order, from the first
// (those an earlier writer left, read back, included), as the digest is
// computed over them; a chunked Fill hands them on as its prefix grows.
// Set it before the first Write or Fill.
func (w *FileWriter) Follow(f io.Writer) { w.follow = quiet(f) }

// hashing is where the bytes being hashed go: the hash and the follower.
func (w *FileWriter) hashing(h hash.Hash) io.Writer {
	if w.follow == nil {
		return h
	}
	return io.MultiWriter(h, w.follow)
}

// Offset is how many leading bytes are already written.
func (w *FileWriter) Offset() int64 { return w.n }

// Resumed is how many bytes an earlier writer left (not all of them
// leading, for a chunked partial).
func (w *FileWriter) Resumed() int64 { return w.resumed }

// Created says whether this writer created the partial file (a run that
// runs out of space removes what it created).
func (w *FileWriter) Created() bool { return w.created }

// PartialPath is the partial file being written.
func (w *FileWriter) PartialPath() string { return w.path }

// Chunked says whether the partial is being written in chunks.
func (w *FileWriter) Chunked() bool { return w.chunked }

// startStream prepares one stream from Offset: the bytes kept are hashed
// again, so the digest covers every byte of the file, and anything past
// them (a chunked partial's later chunks) is dropped.
func (w *FileWriter) startStream() error {
	if w.chunked {
		os.Remove(RangesPath(w.path))
		w.chunked, w.done = false, nil
	}
	if err := w.f.Truncate(w.n); err != nil {
		return err
	}
	w.h = sha256.New()
	if _, err := io.Copy(w.hashing(w.h), io.NewSectionReader(w.f, 0, w.n)); err != nil {
		return fmt.Errorf("blob %s: reading partial: %v", w.dg, err)
	}
	return nil
}

func (w *FileWriter) Write(p []byte) (int, error) {
	if w.h == nil {
		if err := w.startStream(); err != nil {
			return 0, err
		}
	}
	if w.n+int64(len(p)) > w.size {
		return 0, fmt.Errorf("blob %s: %w: more than the %d bytes its descriptor names", w.dg, registry.ErrSizeMismatch, w.size)
	}
	n, err := w.f.WriteAt(p, w.n)
	w.h.Write(p[:n])
	if w.follow != nil {
		w.follow.Write(p[:n])
	}
	w.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("writing blob %s: %w", w.dg, err)
	}
	return n, nil
}

// Commit verifies the blob, makes it durable and renames it into Root. It
// always closes the writer; a blob that does not verify stays a partial
// (Abort it).
func (w *FileWriter) Commit(ctx context.Context) error {
	defer w.Close()
	var sum string
	switch {
	case w.chunked && w.sum != "":
		sum = w.sum
	case w.chunked:
		got := w.done.Bytes()
		return fmt.Errorf("blob %s: %w: %d of its %d bytes written", w.dg, registry.ErrSizeMismatch, got, w.size)
	default:
		if w.h == nil {
			if err := w.startStream(); err != nil {
				return err
			}
		}
		if w.n != w.size {
			return fmt.Errorf("blob %s: %w: got %d bytes, descriptor says %d", w.dg, registry.ErrSizeMismatch, w.n, w.size)
		}
		sum = hex.EncodeToString(w.h.Sum(nil))
	}
	if sum != w.dg.Hex {
		return fmt.Errorf("blob %s: %w: its %d bytes hash to sha256:%s", w.dg, registry.ErrDigestMismatch, w.size, sum)
	}
	// The digest covers size bytes; anything past them was never checked.
	st, err := w.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != w.size {
		return fmt.Errorf("blob %s: %w: the partial holds %d bytes, the descriptor names %d", w.dg, registry.ErrSizeMismatch, st.Size(), w.size)
	}
	if err := w.d.Sync.sync(w.f); err != nil {
		return fmt.Errorf("blob %s: %w", w.dg, err)
	}
	dst := w.d.Path(w.dg)
	if err := os.Rename(w.path, dst); err != nil {
		return fmt.Errorf("blob %s: %w", w.dg, err)
	}
	os.Remove(RangesPath(w.path))
	if !w.d.Staging {
		if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
			return err
		}
	}
	// Verified as written: Has need not hash it again.
	if fi, err := w.f.Stat(); err == nil {
		w.d.stamp(w.dg, fi)
	}
	return nil
}

// Close keeps what was written (a chunked partial's record up to date)
// for the next writer.
func (w *FileWriter) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if w.chunked {
		if _, err := os.Stat(w.path); err == nil {
			_ = WriteRanges(w.path, w.size, w.done)
		}
	}
	return w.f.Close()
}

// Abort discards the partial (while still holding its lock, so a waiting
// writer never takes over a file about to vanish).
func (w *FileWriter) Abort(ctx context.Context) error {
	err := os.Remove(w.path)
	os.Remove(RangesPath(w.path))
	w.chunked = false
	w.closed = true
	w.f.Close()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// FillOptions configure Fill.
type FillOptions struct {
	// Chunk is the Range request size.
	Chunk int64
	// Acquire takes one connection slot (shared by everything a run
	// fetches) and returns its release; nil means Conns slots of its own.
	Acquire func(ctx context.Context) (func(), error)
	Conns   int
	Limit   *rate.Limiter
	// Progress and Fetched count the bytes fetched (either may be nil).
	Progress, Fetched *atomic.Int64
}

// Fill fetches the bytes the partial lacks from src in parallel Range
// chunks written with WriteAt into the preallocated file. The sha256 must
// still be computed in byte order, so one hasher goroutine follows the
// contiguous prefix of written bytes and reads it back from the page
// cache: hashing overlaps the transfer, and when the last chunk lands
// only the bytes written since the prefix last grew are left to hash.
// Chunks go out in ascending order, so the prefix trails the transfer by
// about the number of connections.
//
// Which bytes are on disk is recorded beside the partial, rewritten
// atomically whenever a chunk completes or a transfer breaks; a rerun
// fetches only the complement. The record is not fsynced: after a power
// loss it may claim bytes that never reached the disk, which the sha256
// over every byte catches at Commit, and the blob is fetched once more.
func (w *FileWriter) Fill(ctx context.Context, src Source, o FillOptions) error {
	if o.Chunk <= 0 {
		return fmt.Errorf("blob %s: chunk size %d", w.dg, o.Chunk)
	}
	if w.h != nil {
		return fmt.Errorf("blob %s: already written as one stream", w.dg)
	}
	if !w.chunked {
		// A partial left by one stream holds its first bytes. The record
		// comes before the preallocation, so that a full-size partial never
		// exists without one.
		var done Ranges
		done = done.Add(0, w.n)
		if err := WriteRanges(w.path, w.size, done); err != nil {
			return err
		}
		w.chunked, w.done = true, done
	}
	st, err := w.f.Stat()
	if err != nil {
		return err
	}
	switch {
	case st.Size() > w.size:
		// fallocate never shrinks: bytes past the blob would be kept unhashed.
		if err := w.f.Truncate(w.size); err != nil {
			return err
		}
	case st.Size() < w.size:
		if err := preallocate(w.f, w.size); err != nil {
			return err
		}
	}
	if o.Acquire == nil {
		conns := make(chan struct{}, max(o.Conns, 1))
		o.Acquire = func(ctx context.Context) (func(), error) {
			select {
			case conns <- struct{}{}:
				return func() { <-conns }, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	b := &fill{w: w, src: src, o: o, done: w.done}
	b.cond = sync.NewCond(&b.mu)
	type hashResult struct {
		sum string
		err error
	}
	hashed := make(chan hashResult, 1)
	go func() {
		s, err := b.hash()
		hashed <- hashResult{s, err}
	}()
	ferr := b.fetchMissing(ctx, max(o.Conns, 1))
	b.mu.Lock()
	b.closed = true
	w.done = b.done
	b.cond.Broadcast()
	b.mu.Unlock()
	hr := <-hashed
	if ferr != nil {
		// Keep what did arrive for the next attempt or run.
		if err := WriteRanges(w.path, w.size, w.done); err != nil && !IsNoSpace(ferr) {
			return err
		}
		if IsNoSpace(ferr) || ctx.Err() != nil {
			return ferr
		}
		return fmt.Errorf("blob %s: %w (%d of %d bytes kept to resume)", w.dg, ferr, w.done.Bytes(), w.size)
	}
	if hr.err != nil {
		return fmt.Errorf("blob %s: hashing %s: %v", w.dg, w.path, hr.err)
	}
	w.sum = hr.sum
	w.n = w.size
	return nil
}

// fill is one chunked Fill in progress.
type fill struct {
	w   *FileWriter
	src Source
	o   FillOptions

	recMu  sync.Mutex // orders record writes
	mu     sync.Mutex
	cond   *sync.Cond
	done   Ranges // bytes on disk (grows every write)
	closed bool   // no more writes: the hasher stops at the prefix
}

// fetchMissing fetches the complement of done, chunk by chunk in
// ascending order, on at most conns workers.
func (b *fill) fetchMissing(ctx context.Context, conns int) error {
	todo := b.done.Missing(b.w.size, b.o.Chunk)
	if len(todo) == 0 {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	next := make(chan [2]int64, len(todo))
	for _, c := range todo {
		next <- c
	}
	close(next)
	for range min(len(todo), conns) {
		g.Go(func() error {
			buf := make([]byte, 256<<10)
			for c := range next {
				if err := b.fetchChunk(gctx, c[0], c[1], buf); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// fetchChunk makes one request for [a, e) (the source resumes a broken
// body itself), writes what arrives and records it.
func (b *fill) fetchChunk(ctx context.Context, a, e int64, buf []byte) error {
	n, err := b.fetchRange(ctx, a, e, buf)
	if err != nil {
		return fmt.Errorf("bytes %d-%d: %w", a+n, e-1, err)
	}
	// Start writing the chunk back now, so that the sync before the
	// rename finds little left to do; then record it.
	b.w.d.Sync.writeback(b.w.f, a, e-a)
	b.recMu.Lock()
	defer b.recMu.Unlock()
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	return WriteRanges(b.w.path, b.w.size, done)
}

// fetchRange writes [a, e) as it arrives; n is the bytes written (and
// recorded) even when err is set.
func (b *fill) fetchRange(ctx context.Context, a, e int64, buf []byte) (n int64, err error) {
	release, err := b.o.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer release()
	rc, err := b.src.Open(ctx, b.w.dg, a, e-a)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	for a+n < e {
		want := min(int64(len(buf)), e-a-n)
		if err := Wait(ctx, b.o.Limit, int(want)); err != nil {
			return n, err
		}
		k, rerr := io.ReadFull(rc, buf[:want])
		if k > 0 {
			if _, werr := b.w.f.WriteAt(buf[:k], a+n); werr != nil {
				return n, werr
			}
			b.mu.Lock()
			b.done = b.done.Add(a+n, a+n+int64(k))
			b.cond.Broadcast()
			b.mu.Unlock()
			n += int64(k)
			if b.o.Fetched != nil {
				b.o.Fetched.Add(int64(k))
			}
			if b.o.Progress != nil {
				b.o.Progress.Add(int64(k))
			}
		}
		if rerr != nil {
			if rerr == io.ErrUnexpectedEOF || rerr == io.EOF {
				rerr = fmt.Errorf("the source ended at byte %d", a+n)
			}
			return n, rerr
		}
	}
	return n, nil
}

// hash follows the contiguous prefix of written bytes and returns the
// blob's sha256 once every byte is hashed; once closed it stops at the
// prefix with an empty sum.
func (b *fill) hash() (string, error) {
	h := sha256.New()
	out := b.w.hashing(h)
	buf := make([]byte, 1<<20)
	var at int64
	for at < b.w.size {
		b.mu.Lock()
		end := b.done.PrefixEnd(at)
		for end == at && !b.closed {
			b.cond.Wait()
			end = b.done.PrefixEnd(at)
		}
		b.mu.Unlock()
		if end == at { // closed with a hole: the transfer failed
			return "", nil
		}
		if _, err := io.CopyBuffer(out, io.NewSectionReader(b.w.f, at, end-at), buf); err != nil {
			return "", err
		}
		at = end
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
