package weights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/layers/blob"
	"golang.org/x/sync/errgroup"
)

// A large blob is fetched as parallel HTTP Range requests of ChunkSize
// bytes, each written with WriteAt into the preallocated .part file. The
// sha256 must still be computed in byte order, so one hasher goroutine
// follows the contiguous prefix of written bytes and reads it back from the
// page cache: hashing overlaps the transfer on another core, and when the
// last chunk lands only the bytes written since the prefix last grew are
// left to hash. (Hashing the first chunk in-stream instead would tie the
// hash to one connection's pace and leave every other chunk to hash at the
// end.) Chunks are handed out in ascending order, so the prefix trails the
// transfer by about Concurrency chunks.
//
// Which bytes are on disk is recorded in a sidecar, <hex>.part.ranges,
// rewritten atomically (temp file + rename) whenever a chunk completes or a
// transfer breaks; a rerun fetches only the complement. The sidecar is not
// fsynced: after a power loss it may claim bytes that never reached the
// disk, which the final sha256 check (over every byte, resumed or not)
// catches, and the blob is then fetched once more from scratch.

const (
	// DefaultChunkSize is the Range request size for large blobs.
	DefaultChunkSize = 16 << 20
	// DefaultConcurrency bounds the HTTP connections of one pull.
	DefaultConcurrency = 8
	// minChunks: blobs of fewer chunks are fetched on one connection,
	// where a sidecar and a hasher would cost more than they save.
	minChunks = 4
	ioBuf     = 256 << 10
)

// rangeSet is a sorted list of disjoint, non-adjacent [start, end) ranges.
type rangeSet [][2]int64

func (s rangeSet) add(a, b int64) rangeSet {
	if a >= b {
		return s
	}
	out := make(rangeSet, 0, len(s)+1)
	placed := false
	for _, r := range s {
		switch {
		case r[1] < a:
			out = append(out, r)
		case b < r[0]:
			if !placed {
				out = append(out, [2]int64{a, b})
				placed = true
			}
			out = append(out, r)
		default: // overlapping or adjacent: merge into [a, b)
			a, b = min(a, r[0]), max(b, r[1])
		}
	}
	if !placed {
		out = append(out, [2]int64{a, b})
		sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	}
	return out
}

// prefixEnd is the end of the range holding off, or off when none does.
func (s rangeSet) prefixEnd(off int64) int64 {
	for _, r := range s {
		if r[0] <= off && off < r[1] {
			return r[1]
		}
	}
	return off
}

// missing splits the complement of s in [0, size) into pieces of at most
// chunk bytes, in ascending order.
func (s rangeSet) missing(size, chunk int64) [][2]int64 {
	var out [][2]int64
	emit := func(a, b int64) {
		for a < b {
			e := min(a+chunk, b)
			out = append(out, [2]int64{a, e})
			a = e
		}
	}
	at := int64(0)
	for _, r := range s {
		emit(at, min(r[0], size))
		at = max(at, r[1])
	}
	emit(at, size)
	return out
}

func (s rangeSet) bytes() (n int64) {
	for _, r := range s {
		n += r[1] - r[0]
	}
	return n
}

// sidecar is the on-disk record of a chunked partial.
type sidecar struct {
	Size int64      `json:"size"`
	Done [][2]int64 `json:"done"`
}

func sidecarPath(part string) string { return part + ".ranges" }

// readSidecar returns the recorded ranges, ok=false when there is no usable
// record (absent, unreadable, or for another size).
func readSidecar(part string, size int64) (rangeSet, bool) {
	b, err := os.ReadFile(sidecarPath(part))
	if err != nil {
		return nil, false
	}
	var sc sidecar
	if json.Unmarshal(b, &sc) != nil || sc.Size != size {
		return nil, false
	}
	var s rangeSet
	for _, r := range sc.Done {
		if r[0] < 0 || r[1] > size || r[0] >= r[1] {
			return nil, false
		}
		s = s.add(r[0], r[1])
	}
	return s, true
}

func writeSidecar(part string, size int64, done rangeSet) error {
	b, err := json.Marshal(sidecar{Size: size, Done: done})
	if err != nil {
		return err
	}
	tmp := sidecarPath(part) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, sidecarPath(part))
}

// chunked reports whether a blob of size is fetched in Range chunks: large
// enough, or already begun that way by an earlier run.
func (p *puller) chunked(part string, size int64) bool {
	if p.opts.ChunkSize > 0 && size >= minChunks*p.opts.ChunkSize {
		return true
	}
	_, err := os.Stat(sidecarPath(part))
	return err == nil
}

// blobFetch is one chunked download in progress.
type blobFetch struct {
	p    *puller
	d    v1.Hash
	size int64
	part string
	f    *os.File

	scMu   sync.Mutex // orders sidecar writes
	mu     sync.Mutex
	cond   *sync.Cond
	done   rangeSet // bytes on disk (in memory: grows every write)
	closed bool     // no more writes: the hasher stops at the prefix
}

// downloadChunked brings d to part in parallel Range chunks and verifies it.
// It returns how many bytes an earlier run had left.
func (p *puller) downloadChunked(ctx context.Context, d v1.Hash, size int64, part string, first bool) (int64, error) {
	if _, err := os.Lstat(part); errors.Is(err, os.ErrNotExist) {
		p.track(part)
	}
	p.track(sidecarPath(part))
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	done, ok := readSidecar(part, size)
	if !ok {
		// No record: a partial left by a one-connection download holds
		// its first bytes; anything else starts over.
		done = nil
		if have := st.Size(); have > 0 && have <= size {
			done = done.add(0, have)
		} else if have > size {
			if err := f.Truncate(0); err != nil {
				return 0, err
			}
		}
		// The record comes before the preallocation, so that a
		// full-size .part never exists without one.
		if err := writeSidecar(part, size, done); err != nil {
			return 0, err
		}
	}
	switch {
	case st.Size() > size:
		// fallocate never shrinks: bytes past the blob would be renamed
		// into the volume unhashed.
		if err := f.Truncate(size); err != nil {
			return 0, err
		}
	case st.Size() < size:
		if err := preallocate(f, size); err != nil {
			return 0, err
		}
	}
	resumed := done.bytes()
	if first && resumed > 0 {
		p.resumed.Add(resumed)
		if p.opts.Progress != nil {
			p.opts.Progress.Add(resumed)
		}
	}

	b := &blobFetch{p: p, d: d, size: size, part: part, f: f, done: done}
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

	ferr := b.fetchMissing(ctx)
	b.mu.Lock()
	b.closed = true
	final := b.done
	b.cond.Broadcast()
	b.mu.Unlock()
	hr := <-hashed
	if ferr != nil {
		// Keep what did arrive for the next attempt or run.
		if err := writeSidecar(part, size, final); err != nil && !isNoSpace(ferr) {
			return resumed, err
		}
		if isNoSpace(ferr) || ctx.Err() != nil {
			return resumed, ferr
		}
		return resumed, fmt.Errorf("blob %s: %v (%d of %d bytes kept in %s to resume)", d, ferr, final.bytes(), size, PartialDir)
	}
	if hr.err != nil {
		return resumed, fmt.Errorf("blob %s: hashing %s: %v", d, part, hr.err)
	}
	if hr.sum != d.Hex {
		f.Close()
		os.Remove(part)
		os.Remove(sidecarPath(part))
		return resumed, fmt.Errorf("blob %s: %w: its %d bytes hash to sha256:%s; the partial download was discarded", d, ErrCorrupt, size, hr.sum)
	}
	if err := checkPartSize(f, d, size); err != nil {
		return resumed, err
	}
	if err := p.datasync(f); err != nil {
		return resumed, err
	}
	if err := f.Close(); err != nil {
		return resumed, err
	}
	// Verified and flushed: the .part is complete without its record.
	os.Remove(sidecarPath(part))
	return resumed, nil
}

// fetchMissing fetches the complement of done, chunk by chunk in ascending
// order, at most Concurrency requests at once (shared with the whole pull).
func (b *blobFetch) fetchMissing(ctx context.Context) error {
	todo := b.done.missing(b.size, b.p.opts.ChunkSize)
	if len(todo) == 0 {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	next := make(chan [2]int64, len(todo))
	for _, c := range todo {
		next <- c
	}
	close(next)
	for range min(len(todo), b.p.opts.Concurrency) {
		g.Go(func() error {
			buf := make([]byte, ioBuf)
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

// fetchChunk fetches [a, e), resuming within the chunk after a broken
// transfer, up to Attempts requests.
func (b *blobFetch) fetchChunk(ctx context.Context, a, e int64, buf []byte) error {
	start := a
	var last error
	for attempt := 0; attempt < b.p.opts.Attempts && a < e; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := b.fetchRange(ctx, a, e, buf)
		a += n
		if err == nil || isNoSpace(err) || ctx.Err() != nil {
			last = err
			break
		}
		last = err
	}
	if a < e {
		if last == nil {
			last = fmt.Errorf("transfer broke")
		}
		return fmt.Errorf("bytes %d-%d: %w", a, e-1, last)
	}
	// Start writing the chunk back now, so that the fdatasync before the
	// rename finds little left to do; then record it.
	b.p.writeback(b.f, start, e-start)
	b.scMu.Lock()
	defer b.scMu.Unlock()
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	return writeSidecar(b.part, b.size, done)
}

// fetchRange makes one request for [a, e) and writes what arrives; n is
// the bytes written (and recorded) even when err is set.
func (b *blobFetch) fetchRange(ctx context.Context, a, e int64, buf []byte) (n int64, err error) {
	release, err := b.p.acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer release()
	rc, err := b.p.src.Open(ctx, b.d, a, e-a)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	for a+n < e {
		want := min(int64(len(buf)), e-a-n)
		if err := blob.Wait(ctx, b.p.limit, int(want)); err != nil {
			return n, err
		}
		k, rerr := io.ReadFull(rc, buf[:want])
		if k > 0 {
			if _, werr := b.f.WriteAt(buf[:k], a+n); werr != nil {
				return n, werr
			}
			b.mu.Lock()
			b.done = b.done.add(a+n, a+n+int64(k))
			b.cond.Broadcast()
			b.mu.Unlock()
			n += int64(k)
			b.p.fetched.Add(int64(k))
			if b.p.opts.Progress != nil {
				b.p.opts.Progress.Add(int64(k))
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
// blob's sha256 once every byte is hashed; after closed it stops at the
// prefix with an empty sum.
func (b *blobFetch) hash() (string, error) {
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var at int64
	for at < b.size {
		b.mu.Lock()
		end := b.done.prefixEnd(at)
		for end == at && !b.closed {
			b.cond.Wait()
			end = b.done.prefixEnd(at)
		}
		b.mu.Unlock()
		if end == at { // closed with a hole: the transfer failed
			return "", nil
		}
		if _, err := io.CopyBuffer(h, io.NewSectionReader(b.f, at, end-at), buf); err != nil {
			return "", err
		}
		at = end
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// acquire takes one of the pull's Concurrency connection slots.
func (p *puller) acquire(ctx context.Context) (func(), error) {
	select {
	case p.conns <- struct{}{}:
		return func() { <-p.conns }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// checkPartSize makes sure a verified partial holds exactly the blob: the
// digest covers size bytes, so anything past them was never checked.
func checkPartSize(f *os.File, d v1.Hash, size int64) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != size {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("blob %s: %w: the partial holds %d bytes, the manifest names %d; it was discarded", d, ErrCorrupt, st.Size(), size)
	}
	return nil
}
