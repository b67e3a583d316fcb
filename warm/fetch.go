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
// connections while memory stays bounded by par × chunk.
type chunkedReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	queue  chan chan chunkResult
	cur    *bytes.Reader
	buf    []byte
	err    error
	wg     sync.WaitGroup
}

type chunkResult struct {
	b   []byte
	err error
}

var chunkPool sync.Pool

func getChunkBuf(n int64) []byte {
	if b, ok := chunkPool.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func newChunkedReader(ctx context.Context, src Source, repo name.Repository, dg digest.Digest, off, size, chunk int64, par int) *chunkedReader {
	ctx, cancel := context.WithCancel(ctx)
	c := &chunkedReader{ctx: ctx, cancel: cancel, queue: make(chan chan chunkResult, par)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(c.queue)
		// A buffered queue of par results bounds the chunks in flight or
		// waiting to be read.
		for o := off; o < size; o += chunk {
			n := min(chunk, size-o)
			res := make(chan chunkResult, 1)
			select {
			case c.queue <- res:
			case <-ctx.Done():
				return
			}
			c.wg.Add(1)
			go func(o, n int64) {
				defer c.wg.Done()
				res <- fetchChunk(ctx, src, repo, dg, o, n)
			}(o, n)
		}
	}()
	return c
}

// fetchChunk reads exactly n bytes at o, retrying a body that breaks.
func fetchChunk(ctx context.Context, src Source, repo name.Repository, dg digest.Digest, o, n int64) chunkResult {
	buf := getChunkBuf(n)
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
	chunkPool.Put(&buf)
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
		if old := c.buf; old != nil {
			// A copy of the slice header: c.buf is reassigned just below.
			chunkPool.Put(&old)
		}
		c.buf = r.b
		c.cur = bytes.NewReader(r.b)
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
