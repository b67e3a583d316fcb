package warm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"
	"golang.org/x/time/rate"
)

// chunkedReader reads [off, size) of a blob as parallel Range requests of
// chunk bytes, at most par in flight, and hands the bytes out in order: a
// sequential writer (containerd's ingest) gets the throughput of several
// connections while memory stays bounded by (par+2) × chunk, buffers that
// are reused for the whole blob (a 2 GiB layer allocates no more than a
// 64 MiB one).
type chunkedReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	queue  chan chan chunkResult
	bufs   *buffers
	cur    *bytes.Reader
	buf    []byte
	err    error
	wg     sync.WaitGroup
}

type chunkResult struct {
	b   []byte
	err error
}

func newChunkedReader(ctx context.Context, src Source, repo name.Repository, dg digest.Digest, off, size, chunk int64, par int) *chunkedReader {
	ctx, cancel := context.WithCancel(ctx)
	// In use at once: par queued (fetching or fetched), the one being
	// read, and the one the dispatcher holds while the queue is full.
	c := &chunkedReader{ctx: ctx, cancel: cancel, queue: make(chan chan chunkResult, par), bufs: newBuffers(int(chunk), par+2)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(c.queue)
		// A buffered queue of par results bounds the chunks in flight or
		// waiting to be read.
		for o := off; o < size; o += chunk {
			n := min(chunk, size-o)
			buf, ok := c.bufs.get(ctx.Done())
			if !ok {
				return
			}
			res := make(chan chunkResult, 1)
			select {
			case c.queue <- res:
			case <-ctx.Done():
				return
			}
			c.wg.Add(1)
			go func(o, n int64) {
				defer c.wg.Done()
				res <- fetchChunk(ctx, src, repo, dg, o, buf[:n])
			}(o, n)
		}
	}()
	return c
}

// fetchChunk fills buf with the bytes at o, retrying a body that breaks.
func fetchChunk(ctx context.Context, src Source, repo name.Repository, dg digest.Digest, o int64, buf []byte) chunkResult {
	n := int64(len(buf))
	var last error
	for try := 0; try < 4; try++ {
		rc, err := src.OpenRange(ctx, repo, dg, o, n)
		if err != nil {
			return chunkResult{err: err}
		}
		_, err = io.ReadFull(rc, buf)
		rc.Close()
		if err == nil {
			return chunkResult{b: buf}
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return chunkResult{err: fmt.Errorf("blob %s: bytes %d-%d: %w", dg, o, o+n-1, last)}
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	for {
		if c.err != nil {
			return 0, c.err
		}
		if c.cur != nil && c.cur.Len() > 0 {
			return c.cur.Read(p)
		}
		res, ok := <-c.queue
		if !ok {
			c.err = io.EOF
			return 0, io.EOF
		}
		r := <-res
		if r.err != nil {
			c.err = r.err
			return 0, r.err
		}
		if c.buf != nil {
			c.bufs.put(c.buf)
		}
		c.buf = r.b
		c.cur = bytes.NewReader(r.b)
	}
}

// buffers is a set of at most max buffers of size bytes, made on demand
// and reused: a stream that cycles through them allocates at most max,
// however long it is, and gives the garbage collector nothing to chase.
type buffers struct {
	size int
	free chan []byte
	mu   sync.Mutex
	made int
}

func newBuffers(size, max int) *buffers {
	return &buffers{size: size, free: make(chan []byte, max)}
}

// get returns a free buffer, a new one while fewer than max exist, or
// waits for one to be put back; false when done closes first.
func (b *buffers) get(done <-chan struct{}) ([]byte, bool) {
	select {
	case buf := <-b.free:
		return buf, true
	default:
	}
	b.mu.Lock()
	if b.made < cap(b.free) {
		b.made++
		b.mu.Unlock()
		return make([]byte, b.size), true
	}
	b.mu.Unlock()
	select {
	case buf := <-b.free:
		return buf, true
	case <-done:
		return nil, false
	}
}

// put hands back a buffer get returned (or a slice of one).
func (b *buffers) put(buf []byte) {
	select {
	case b.free <- buf[:cap(buf)]:
	default: // not one of ours: drop it
	}
}

func (c *chunkedReader) Close() error {
	// Fetches deliver into buffered channels and the dispatcher watches
	// the context, so cancelling lets every goroutine exit.
	c.cancel()
	c.wg.Wait()
	return nil
}

// meter counts bytes, feeds the progress counter and applies the rate
// limit.
type meter struct {
	ctx      context.Context
	r        io.Reader
	n        int64
	progress *atomic.Int64
	limit    *rate.Limiter
}

func (m *meter) Read(p []byte) (int, error) {
	if m.limit != nil && len(p) > m.limit.Burst() {
		p = p[:m.limit.Burst()]
	}
	n, err := m.r.Read(p)
	if n > 0 {
		m.n += int64(n)
		if m.progress != nil {
			m.progress.Add(int64(n))
		}
		if m.limit != nil {
			if werr := m.limit.WaitN(m.ctx, n); werr != nil && err == nil {
				err = werr
			}
		}
	}
	return n, err
}
