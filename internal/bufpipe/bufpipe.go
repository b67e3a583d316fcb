// Package bufpipe is io.Pipe with a bounded queue between its ends: a
// writer hands on copies of what it writes and goes on while the reader
// (another goroutine: a decoder, a hash, a check) catches up, waiting
// only when the queue's n buffers are full. Memory is bounded by n+2
// buffers of size bytes, reused for the whole stream. Buffers is that set
// of reusable buffers, on its own for other bounded streams (blob's
// OrderedReader, the live ingest's decoder).
package bufpipe

import (
	"errors"
	"io"
	"sync"
)

// Pipe is one bounded pipe; its Write and Read may be called from two
// goroutines (one each).
type Pipe struct {
	q    chan []byte
	bufs *Buffers

	cur, rest []byte // the buffer being read and its unread bytes

	mu      sync.Mutex
	wclosed bool
	werr    error         // why the writer closed (nil: io.EOF)
	rerr    error         // why the reader closed
	rdone   chan struct{} // closed when the reader closes
	wdone   chan struct{} // closed when the writer closes
}

// New is a pipe of at most n queued buffers of size bytes.
func New(size, n int) *Pipe {
	n = max(n, 1)
	return &Pipe{
		q: make(chan []byte, n), bufs: NewBuffers(size, n+2),
		rdone: make(chan struct{}), wdone: make(chan struct{}),
	}
}

func (p *Pipe) get() ([]byte, error) {
	b, ok := p.bufs.Get(p.rdone)
	if !ok {
		return nil, p.readErr()
	}
	return b, nil
}

func (p *Pipe) readErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rerr != nil {
		return p.rerr
	}
	return io.ErrClosedPipe
}

// Write queues a copy of b; it waits only while the queue is full, and
// fails once the reader has closed.
func (p *Pipe) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		select {
		case <-p.rdone:
			return n, p.readErr()
		default:
		}
		buf, err := p.get()
		if err != nil {
			return n, err
		}
		k := copy(buf, b)
		select {
		case p.q <- buf[:k]:
		case <-p.rdone:
			return n, p.readErr()
		}
		b = b[k:]
		n += k
	}
	return n, nil
}

// CloseWrite ends the stream: the reader reads what is queued, then err
// (io.EOF when nil). Only the first close counts.
func (p *Pipe) CloseWrite(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wclosed {
		return
	}
	p.wclosed, p.werr = true, err
	close(p.wdone)
}

// Read reads what the writer wrote, in order.
func (p *Pipe) Read(b []byte) (int, error) {
	for len(p.rest) == 0 {
		if p.cur != nil {
			p.bufs.Put(p.cur)
			p.cur = nil
		}
		select {
		case buf := <-p.q:
			p.cur, p.rest = buf, buf
			continue
		default:
		}
		select {
		case buf := <-p.q:
			p.cur, p.rest = buf, buf
		case <-p.wdone:
			// Drain what was queued before the close.
			select {
			case buf := <-p.q:
				p.cur, p.rest = buf, buf
				continue
			default:
			}
			p.mu.Lock()
			err := p.werr
			p.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		case <-p.rdone:
			return 0, errors.New("bufpipe: read after close")
		}
	}
	n := copy(b, p.rest)
	p.rest = p.rest[n:]
	return n, nil
}

// CloseRead stops the reader: the writer's next Write fails with err
// (io.ErrClosedPipe when nil). Only the first close counts.
func (p *Pipe) CloseRead(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.rdone:
		return
	default:
	}
	p.rerr = err
	close(p.rdone)
}

// Buffers is a set of at most max buffers of size bytes, made on demand
// and reused: a stream that cycles through them allocates at most max,
// however long it is, and gives the garbage collector nothing to chase.
type Buffers struct {
	size int
	free chan []byte
	mu   sync.Mutex
	made int
}

// NewBuffers returns an empty set of at most max buffers of size bytes.
func NewBuffers(size, max int) *Buffers {
	return &Buffers{size: size, free: make(chan []byte, max)}
}

// Get returns a free buffer, a new one while fewer than max exist, or
// waits for one to be put back; false when done closes first.
func (b *Buffers) Get(done <-chan struct{}) ([]byte, bool) {
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

// Put hands back a buffer Get returned (or a slice of one).
func (b *Buffers) Put(buf []byte) {
	select {
	case b.free <- buf[:cap(buf)]:
	default: // not one of ours: drop it
	}
}

// Made is how many buffers were allocated so far.
func (b *Buffers) Made() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.made
}
