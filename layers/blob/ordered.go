package blob

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/bufpipe"
)

// OrderedReader reads [off, size) of a blob as parallel Range requests of
// chunk bytes, at most par in flight, and hands the bytes out in order: a
// sequential writer (containerd's ingest) gets the throughput of several
// connections while memory stays bounded by (par+2) × chunk, buffers that
// are reused for the whole blob (a 2 GiB layer allocates no more than a
// 64 MiB one). A chunk is one Open of the source: resuming a broken body
// and backing off are the source's (the registry Client's) policy, not
// a second retry loop here.
type OrderedReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	queue  chan chan chunkResult
	bufs   *bufpipe.Buffers
	cur    *bytes.Reader
	buf    []byte
	err    error
	wg     sync.WaitGroup
}

type chunkResult struct {
	b   []byte
	err error
}

// NewOrderedReader starts reading dg's bytes [off, size) from src.
func NewOrderedReader(ctx context.Context, src Source, dg v1.Hash, off, size, chunk int64, par int) *OrderedReader {
	ctx, cancel := context.WithCancel(ctx)
	par = max(par, 1)
	// In use at once: par queued (fetching or fetched), the one being
	// read, and the one the dispatcher holds while the queue is full.
	c := &OrderedReader{ctx: ctx, cancel: cancel, queue: make(chan chan chunkResult, par), bufs: bufpipe.NewBuffers(int(chunk), par+2)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(c.queue)
		// A buffered queue of par results bounds the chunks in flight or
		// waiting to be read.
		for o := off; o < size; o += chunk {
			n := min(chunk, size-o)
			buf, ok := c.bufs.Get(ctx.Done())
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
				res <- readChunk(ctx, src, dg, o, buf[:n])
			}(o, n)
		}
	}()
	return c
}

// readChunk fills buf with the bytes of dg at o.
func readChunk(ctx context.Context, src Source, dg v1.Hash, o int64, buf []byte) chunkResult {
	n := int64(len(buf))
	rc, err := src.Open(ctx, dg, o, n)
	if err == nil {
		_, err = io.ReadFull(rc, buf)
		rc.Close()
	}
	if err != nil {
		return chunkResult{err: fmt.Errorf("blob %s: bytes %d-%d: %w", dg, o, o+n-1, err)}
	}
	return chunkResult{b: buf}
}

func (c *OrderedReader) Read(p []byte) (int, error) {
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
			c.bufs.Put(c.buf)
		}
		c.buf = r.b
		c.cur = bytes.NewReader(r.b)
	}
}

// Close stops the fetches and waits for them.
func (c *OrderedReader) Close() error {
	// Fetches deliver into buffered channels and the dispatcher watches
	// the context, so cancelling lets every goroutine exit.
	c.cancel()
	c.wg.Wait()
	return nil
}
