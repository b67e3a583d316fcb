package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/time/rate"

	"github.com/kiln-build/kiln/registry"
)

// Writer writes one blob, containerd's content.Writer in small: Offset is
// what an earlier, interrupted writer left; bytes become visible only at
// Commit, which verifies size and digest and always closes; Close keeps
// the bytes written so far for a later writer of the same blob; Abort
// discards them. Commit (or the Ingester) returns ErrAlreadyExists when
// the blob is already committed.
type Writer interface {
	io.Writer
	Offset() int64
	Commit(ctx context.Context) error
	Close() error
	Abort(ctx context.Context) error
}

// Bytes is a Source of one blob already in memory (a manifest or config
// read while resolving).
type Bytes []byte

// Open implements Source.
func (b Bytes) Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error) {
	if off < 0 || off > int64(len(b)) || (n >= 0 && off+n > int64(len(b))) {
		return nil, fmt.Errorf("blob %s: range %d+%d is outside its %d bytes", dg, off, n, len(b))
	}
	if n < 0 {
		n = int64(len(b)) - off
	}
	return io.NopCloser(bytes.NewReader(b[off : off+n])), nil
}

// CopyOptions configure Copy.
type CopyOptions struct {
	// Attempts bounds the tries of the whole blob (default 4). A broken
	// transfer resumes from what was written; a blob that fails its digest
	// is discarded and fetched from zero (once more than Attempts when the
	// bad bytes may be an earlier run's).
	Attempts int
	// A stream of at least ChunkThreshold bytes to a plain Writer is read
	// as Chunks ordered parallel Range requests of ChunkSize bytes
	// (OrderedReader); a FileWriter instead gets Fill's WriteAt chunks
	// when the blob has at least MinChunks of them or was begun that way.
	ChunkSize, ChunkThreshold int64
	Chunks                    int
	// Fill configures FileWriter chunks (Chunk defaults to ChunkSize).
	Fill FillOptions
	// Limit paces the bytes read; Progress counts them, from what an
	// earlier run left (the first writer's resumed bytes, counted as it
	// opens, so that a bar starts there) to the blob's size.
	Limit    *rate.Limiter
	Progress *atomic.Int64
	// Log reports a failed try that will be retried.
	Log func(format string, a ...any)
	// Follow, when set, is called as a try starts that will hand the
	// writer it returns every byte of the blob, from the first, in order,
	// as the digest is computed over them (a check of the content that
	// overlaps the transfer). A try that resumes a stream it cannot read
	// back does not call it; its writer's errors are ignored.
	Follow func() io.Writer
}

// CopyResult says what a Copy moved.
type CopyResult struct {
	// Fetched is the bytes read from the source, over every try.
	Fetched int64
	// Resumed is what the first writer found already written.
	Resumed int64
	// Exists says the blob was already committed.
	Exists bool
	// Followed says the try that committed the blob handed every byte of
	// it to the writer Follow returned last.
	Followed bool
}

// Copy writes blob dg of size bytes from src into the writers open hands
// out, one per try, resuming from each one's Offset. Nothing is committed
// that did not verify; a full disk is never retried.
func Copy(ctx context.Context, open func(context.Context) (Writer, error), src Source, dg v1.Hash, size int64, o CopyOptions) (CopyResult, error) {
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	var res CopyResult
	var last error
	fresh := false
	for attempt := 1; attempt <= o.Attempts; attempt++ {
		n, resumed, followed, err := copyOnce(ctx, open, src, dg, size, o, attempt == 1)
		res.Fetched += n
		if attempt == 1 {
			res.Resumed = resumed
		}
		if errors.Is(err, ErrAlreadyExists) {
			res.Exists = n == 0
			if counted := res.Resumed + res.Fetched; o.Progress != nil && counted < size {
				o.Progress.Add(size - counted) // committed by another writer: all there
			}
			return res, nil
		}
		if err == nil {
			res.Followed = followed
			return res, nil
		}
		last = err
		if ctx.Err() != nil || IsNoSpace(err) {
			break
		}
		// The bytes that failed the digest may be an earlier run's: one
		// more try from zero does not count against the attempts.
		if errors.Is(err, registry.ErrDigestMismatch) && resumed > 0 && !fresh {
			fresh = true
			attempt--
		}
		if o.Log != nil && attempt < o.Attempts {
			o.Log("blob %s: try %d/%d failed: %v", dg, attempt, o.Attempts, err)
		}
	}
	return res, last
}

// copyOnce is one try; the first counts the bytes its writer resumed
// from in o.Progress (later tries resume from bytes already counted).
// followed says a Follow writer saw every byte of the committed blob.
func copyOnce(ctx context.Context, open func(context.Context) (Writer, error), src Source, dg v1.Hash, size int64, o CopyOptions, first bool) (int64, int64, bool, error) {
	w, err := open(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	off := w.Offset()
	resumed := off
	fw, isFile := w.(*FileWriter)
	if isFile {
		resumed = fw.Resumed()
	}
	if first && o.Progress != nil && resumed > 0 && resumed <= size {
		o.Progress.Add(resumed)
	}
	if off > size {
		w.Abort(ctx)
		return 0, resumed, false, fmt.Errorf("blob %s: the partial holds %d bytes, more than its %d", dg, off, size)
	}
	// A file writer hashes from its first byte whatever it resumes (the
	// follower sees the kept bytes read back); another writer's kept bytes
	// cannot be read back, so only a try from zero is followed.
	var follow io.Writer
	if o.Follow != nil && (isFile || off == 0) {
		follow = quiet(o.Follow())
		if isFile {
			fw.Follow(follow)
		} else {
			w = teeWriter{w, follow}
		}
	}
	var fetched int64
	chunk := o.Fill.Chunk
	if chunk <= 0 {
		chunk = o.ChunkSize
	}
	if isFile && chunk > 0 && (fw.Chunked() || size >= MinChunks*chunk) {
		var counted atomic.Int64
		fo := o.Fill
		fo.Chunk = chunk
		if fo.Limit == nil {
			fo.Limit = o.Limit
		}
		if fo.Progress == nil {
			fo.Progress = o.Progress
		}
		if fo.Conns <= 0 {
			fo.Conns = max(o.Chunks, 1)
		}
		outer := fo.Fetched
		fo.Fetched = &counted
		err = fw.Fill(ctx, src, fo)
		fetched = counted.Load()
		if outer != nil {
			outer.Add(fetched)
		}
	} else {
		var r io.Reader
		var closer io.Closer
		switch {
		case off >= size:
			r = bytes.NewReader(nil)
		case size-off >= o.ChunkThreshold && o.ChunkThreshold > 0 && o.Chunks > 1 && o.ChunkSize > 0:
			cr := NewOrderedReader(ctx, src, dg, off, size, o.ChunkSize, o.Chunks)
			r, closer = cr, cr
		default:
			// A closed range: some registries do not understand "bytes=N-".
			n := int64(-1)
			if off > 0 {
				n = size - off
			}
			if o.Fill.Acquire != nil {
				// One of the run's connection slots for this stream too.
				release, aerr := o.Fill.Acquire(ctx)
				if aerr != nil {
					w.Close()
					return 0, resumed, false, aerr
				}
				defer release()
			}
			rc, oerr := src.Open(ctx, dg, off, n)
			if oerr != nil {
				w.Close()
				return 0, resumed, false, oerr
			}
			// One byte more than needed tells a blob that is longer than
			// its descriptor from one that is exactly right.
			r, closer = io.LimitReader(rc, size-off+1), rc
		}
		m := &Meter{Ctx: ctx, R: r, Progress: o.Progress, Limit: o.Limit}
		_, err = io.CopyBuffer(w, m, make([]byte, 1<<20))
		if closer != nil {
			closer.Close()
		}
		fetched = m.N
		if o.Fill.Fetched != nil {
			o.Fill.Fetched.Add(fetched)
		}
	}
	if err != nil {
		if errors.Is(err, registry.ErrSizeMismatch) {
			// More bytes than the descriptor names: none can be trusted.
			w.Abort(ctx)
		} else {
			// Keep the bytes: the next try (or run) resumes from them.
			w.Close()
		}
		return fetched, resumed, false, registry.BlobError(dg, err)
	}
	if err := w.Commit(ctx); err != nil {
		if errors.Is(err, ErrAlreadyExists) {
			return fetched, resumed, false, nil
		}
		if IsNoSpace(err) {
			return fetched, resumed, false, err
		}
		// A blob that does not verify is never committed; its bytes are
		// worthless, so the next try starts from zero.
		w.Abort(ctx)
		return fetched, resumed, false, err
	}
	return fetched, resumed, follow != nil, nil
}

// teeWriter hands what its Writer took on to a follower.
type teeWriter struct {
	Writer
	follow io.Writer
}

func (t teeWriter) Write(p []byte) (int, error) {
	n, err := t.Writer.Write(p)
	t.follow.Write(p[:n])
	return n, err
}

// quietWriter keeps a follower's error to itself: a follower never fails
// the copy it follows.
type quietWriter struct {
	w   io.Writer
	err error
}

func quiet(w io.Writer) io.Writer { return &quietWriter{w: w} }

func (q *quietWriter) Write(p []byte) (int, error) {
	if q.err == nil {
		_, q.err = q.w.Write(p)
	}
	return len(p), nil
}
