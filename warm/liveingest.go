package warm

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
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

// liveProvider serves one live ingest reader as a content.Provider for
// containerd's in-process applier (which asks once).
type liveProvider struct{ r *liveReaderAt }

func (p liveProvider) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	return p.r, nil
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
