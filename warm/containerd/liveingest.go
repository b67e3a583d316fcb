package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/internal/bufpipe"
)

// liveIngest is a direct ingest being written, as a reader sees it: the
// pipelined unpack decompresses a layer from the ingest's data file while
// the download is still appending to it, so decoding overlaps the network
// instead of following it. Bytes below n are in the file.
type liveIngest struct {
	size int64

	mu    sync.Mutex
	cond  *sync.Cond
	n     int64
	ended bool
	err   error // why the writer stopped before committing
	// rf reads the data file. It is opened with the writer: containerd
	// renames the file into blobs/ at commit, possibly before a reader
	// comes. Shared (pread only), closed when the writer and every
	// reader are done with it.
	rf   *os.File
	refs int
}

func newLiveIngest(rf *os.File, off, size int64) *liveIngest {
	li := &liveIngest{rf: rf, n: off, size: size, refs: 1}
	li.cond = sync.NewCond(&li.mu)
	return li
}

// acquire takes a reference on rf (false: already closed).
func (li *liveIngest) acquire() bool {
	li.mu.Lock()
	defer li.mu.Unlock()
	if li.refs == 0 {
		return false
	}
	li.refs++
	return true
}

func (li *liveIngest) release() {
	li.mu.Lock()
	defer li.mu.Unlock()
	li.refs--
	if li.refs == 0 {
		li.rf.Close()
	}
}

func (li *liveIngest) advance(n int64) {
	li.mu.Lock()
	li.n = n
	li.mu.Unlock()
	li.cond.Broadcast()
}

// finish: err nil means containerd committed the blob.
func (li *liveIngest) finish(err error) {
	li.mu.Lock()
	first := !li.ended
	if first {
		li.ended, li.err = true, err
	}
	li.mu.Unlock()
	li.cond.Broadcast()
	if first {
		li.release()
	}
}

var errIngestStopped = errors.New("ingest stopped before its blob was committed")

// readerAt reads the growing file: a read past what is written waits for
// the writer.
type liveReaderAt struct {
	li   *liveIngest
	once sync.Once
}

func (r *liveReaderAt) ReadAt(p []byte, off int64) (int, error) {
	li := r.li
	want := min(off+int64(len(p)), li.size)
	li.mu.Lock()
	for li.n < want && !li.ended {
		li.cond.Wait()
	}
	n, ended, err := li.n, li.ended, li.err
	li.mu.Unlock()
	if ended && err != nil && n < want {
		return 0, err
	}
	if off >= li.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), n-off)]
	k, rerr := li.rf.ReadAt(p, off)
	if rerr == nil && off+int64(k) >= li.size {
		rerr = io.EOF
	}
	return k, rerr
}

func (r *liveReaderAt) Close() error {
	r.once.Do(r.li.release)
	return nil
}
func (r *liveReaderAt) Size() int64 { return r.li.size }

// reader returns a reader of the growing file, or nil when the writer is
// already done with it (the blob is committed, or the write stopped).
func (li *liveIngest) reader() *liveReaderAt {
	if !li.acquire() {
		return nil
	}
	return &liveReaderAt{li: li}
}

// liveIngests is the target's registry of direct ingests being written.
type liveIngests struct {
	mu      sync.Mutex
	m       map[digest.Digest]*liveIngest
	changed chan struct{} // closed and replaced at each registration
}

func (l *liveIngests) register(d digest.Digest, li *liveIngest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[digest.Digest]*liveIngest{}
	}
	l.m[d] = li
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

func (l *liveIngests) unregister(d digest.Digest, li *liveIngest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[d] == li {
		delete(l.m, d)
	}
}

// wait returns d's live ingest once its writer starts, or nil when the
// blob settles first (present before, written through gRPC, or failed).
func (l *liveIngests) wait(ctx context.Context, d digest.Digest, settled <-chan struct{}) *liveIngest {
	for {
		l.mu.Lock()
		li := l.m[d]
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		if li != nil {
			return li
		}
		select {
		case <-ch:
		case <-settled:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// decodedProvider decompresses a layer blob in a goroutine of its own and
// serves the tar stream to containerd's applier as an uncompressed layer:
// inside the applier, decoding and writing files run one after the other
// in a single goroutine (gzip decode and the file syscalls each take about
// half of an apply); split, they use two cores. The applier reads its
// ReaderAt strictly in order (content.NewReader), which is all this
// serves; Size is unknown and reported as the largest size, the stream
// ends with io.EOF. When tar is set, the stream passes kiln's tar reader
// and entry rule on its way (entryCheck): the applier sees only headers
// layers.CheckEntry accepted, whose declared sizes fit in dir.
type decodedProvider struct {
	src content.ReaderAt
	tar bool
	// dir is where the layer unpacks, when tar: the sizes its entries
	// declare must fit the space free there.
	dir string
}

func (p decodedProvider) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	rc, err := compression.DecompressStream(io.NewSectionReader(p.src, 0, p.src.Size()))
	if err != nil {
		p.src.Close()
		return nil, err
	}
	// Buffers in use at once: 8 queued, the one being read, the one
	// being filled; reused for the whole layer.
	d := &decodedReaderAt{src: p.src, rc: rc, chunks: make(chan decodedChunk, 8), bufs: bufpipe.NewBuffers(1<<20, 10), done: make(chan struct{})}
	if p.tar {
		d.check = newEntryCheck(ctx, p.dir)
	}
	go d.decode()
	return d, nil
}

type decodedChunk struct {
	b   []byte
	err error
}

type decodedReaderAt struct {
	src    content.ReaderAt
	rc     compression.DecompressReadCloser
	chunks chan decodedChunk
	bufs   *bufpipe.Buffers
	done   chan struct{}
	once   sync.Once
	check  *entryCheck // nil: not read as a tar

	pos    int64
	cur    []byte
	curBuf []byte // the buffer cur is part of, put back once read
	err    error
}

func (d *decodedReaderAt) decode() {
	defer close(d.chunks)
	// The decoder is closed here, not in Close: a read may be under way.
	defer d.src.Close()
	defer d.rc.Close()
	if d.check != nil {
		defer d.check.close()
	}
	for {
		buf, ok := d.bufs.Get(d.done)
		if !ok {
			return
		}
		n, err := io.ReadFull(d.rc, buf)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		n, err = d.checked(buf[:n], err)
		c := decodedChunk{b: buf[:n], err: err}
		select {
		case d.chunks <- c:
		case <-d.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// checked passes a decoded chunk b (read with err) through the entry
// check, if any: nothing of a chunk holding a refused header goes on,
// and at the end of the stream the reader's verdict is the error.
func (d *decodedReaderAt) checked(b []byte, err error) (int, error) {
	if d.check == nil {
		return len(b), err
	}
	if len(b) > 0 {
		if cerr := d.check.pass(b); cerr != nil {
			d.check.close()
			return 0, cerr
		}
	}
	if err == nil {
		return len(b), nil
	}
	if cerr := d.check.close(); cerr != nil && err == io.EOF {
		err = cerr
	}
	return len(b), err
}

func (d *decodedReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off != d.pos {
		return 0, fmt.Errorf("decoded layer stream read at %d, expected %d (reads must be sequential)", off, d.pos)
	}
	for len(d.cur) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		if d.curBuf != nil {
			d.bufs.Put(d.curBuf)
			d.curBuf = nil
		}
		c, ok := <-d.chunks
		if !ok {
			d.err = io.EOF
			continue
		}
		d.cur, d.curBuf, d.err = c.b, c.b, c.err
	}
	n := copy(p, d.cur)
	d.cur = d.cur[n:]
	d.pos += int64(n)
	return n, nil
}

func (d *decodedReaderAt) Size() int64 { return math.MaxInt64 }

func (d *decodedReaderAt) Close() error {
	d.once.Do(func() { close(d.done) })
	return nil
}
