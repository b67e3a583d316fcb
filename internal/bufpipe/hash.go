package bufpipe

import "hash"

// Hash is a hash.Hash's Write and Sum with the hashing in a goroutine of
// its own: Write copies what it is given into the current buffer and
// queues the buffer when it is full; the goroutine hashes the queue in
// order. A stream's decoder and its hash so take two cores instead of
// adding up on one (a layer walk's gzip decode, its blob digest and its
// diff ID).
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
	stop chan struct{} // closed by Close: hash nothing more
	// closed: the stream ended (Sum or Close); sum: its hash, after Sum.
	closed bool
	sum    []byte
}

// HashBufferSize and HashQueueLen are the sizes kiln's stream hashes use
// (a layer walk's blob digest and diff ID): buffers of a few hundred KiB,
// so that a decoder's small reads cost one queue operation per buffer, not
// per read, and a queue deep enough to ride out the hash falling behind.
const HashBufferSize, HashQueueLen = 256 << 10, 8

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
// goroutine; once only (its callers check closed).
func (a *Hash) finish() {
	a.closed = true
	if len(a.cur) > 0 {
		a.q <- a.cur
	}
	a.cur = nil
	close(a.q)
	<-a.done
}

// Sum appends the hash of everything written to b. It ends the stream:
// later writes are ignored, and later sums give the same hash. After
// Close, it appends nothing.
func (a *Hash) Sum(b []byte) []byte {
	if a.sum == nil {
		if a.closed {
			return b
		}
		a.finish()
		a.sum = a.h.Sum(nil)
	}
	return append(b, a.sum...)
}

// Close ends the goroutine, hashing nothing more of what is queued. A
// Hash already summed or closed is left as it is.
func (a *Hash) Close() error {
	if !a.closed {
		close(a.stop)
		a.finish()
	}
	return nil
}
