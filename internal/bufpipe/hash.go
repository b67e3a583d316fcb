package bufpipe

import (
	"hash"
	"sync"
)

// Hash is a hash.Hash's Write and Sum with the hashing in a goroutine of
// its own: Write copies what it is given into the current buffer and
// queues the buffer when it is full; the goroutine hashes the queue in
// order. A
// stream's decoder and its hash so take two cores instead of adding up
// on one (a layer walk's gzip decode, its blob digest and its diff ID).
// Memory is bounded by n+2 buffers of size bytes.
//
// Sum waits for the queue to be hashed. Close ends the goroutine without
// a sum, for a stream abandoned before its end; a Hash must be summed or
// closed, or its goroutine stays. Write, Sum and Close are for one
// goroutine (the writer's).
type Hash struct {
	h    hash.Hash
	bufs *Buffers
	q    chan []byte
	cur  []byte
	done chan struct{}

	once   sync.Once
	stop   chan struct{}
	closed bool
	sum    []byte
}

// NewHash hashes with h in a goroutine of its own, queueing at most n
// buffers of size bytes.
func NewHash(h hash.Hash, size, n int) *Hash {
	n = max(n, 1)
	a := &Hash{
		h: h, bufs: NewBuffers(size, n+2), q: make(chan []byte, n),
		done: make(chan struct{}), stop: make(chan struct{}),
	}
	go a.run()
	return a
}

func (a *Hash) run() {
	defer close(a.done)
	for buf := range a.q {
		select {
		case <-a.stop:
		default:
			a.h.Write(buf)
		}
		a.bufs.Put(buf)
	}
}

// Write queues a copy of b; it waits only while the queue is full. It
// never fails (hash.Hash's contract); after Sum or Close it is ignored.
func (a *Hash) Write(b []byte) (int, error) {
	n := len(b)
	if a.closed {
		return n, nil
	}
	for len(b) > 0 {
		if a.cur == nil {
			buf, _ := a.bufs.Get(nil)
			a.cur = buf[:0]
		}
		k := copy(a.cur[len(a.cur):cap(a.cur)], b)
		a.cur = a.cur[:len(a.cur)+k]
		b = b[k:]
		if len(a.cur) == cap(a.cur) {
			a.q <- a.cur
			a.cur = nil
		}
	}
	return n, nil
}

// finish queues the last buffer, ends the queue and waits for the
// goroutine.
func (a *Hash) finish() {
	if a.closed {
		return
	}
	a.closed = true
	if len(a.cur) > 0 {
		a.q <- a.cur
	}
	a.cur = nil
	close(a.q)
	<-a.done
}

// Sum appends the hash of everything written to b. It ends the stream:
// later writes are ignored, and later sums give the same hash.
func (a *Hash) Sum(b []byte) []byte {
	if a.sum == nil {
		select {
		case <-a.stop:
			// Closed before a sum: nothing to give.
			return b
		default:
		}
		a.finish()
		a.sum = a.h.Sum(nil)
	}
	return append(b, a.sum...)
}

// Close ends the goroutine, hashing nothing more of what is queued. A
// Hash already summed is left as it is.
func (a *Hash) Close() error {
	if a.sum == nil {
		a.once.Do(func() { close(a.stop) })
	}
	a.finish()
	return nil
}
