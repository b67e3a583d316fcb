package layers

import (
	"container/list"
	"os"
	"sync"
)

// maxOpenBlobs bounds the layer files one image holds open at once.
const maxOpenBlobs = 32

// blobFiles opens an image's local layer files lazily, on their first read,
// and keeps at most maxOpenBlobs of them open (the least recently used idle
// one is closed to make room): an image of 1500 layers never needs 1500
// descriptors, whatever -j is.
type blobFiles struct {
	mu    sync.Mutex
	open  map[string]*openBlob
	lru   *list.List // of *openBlob, most recent first
	limit int
}

type openBlob struct {
	path string
	f    *os.File
	refs int
	elem *list.Element
}

func newBlobFiles() *blobFiles {
	return &blobFiles{open: map[string]*openBlob{}, lru: list.New(), limit: maxOpenBlobs}
}

// file is the io.ReaderAt of the blob at path.
func (b *blobFiles) file(path string) *lazyBlob { return &lazyBlob{files: b, path: path} }

func (b *blobFiles) acquire(path string) (*openBlob, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ob, ok := b.open[path]; ok {
		ob.refs++
		b.lru.MoveToFront(ob.elem)
		return ob, nil
	}
	for e := b.lru.Back(); e != nil && len(b.open) >= b.limit; {
		prev := e.Prev()
		if ob := e.Value.(*openBlob); ob.refs == 0 {
			ob.f.Close()
			b.lru.Remove(e)
			delete(b.open, ob.path)
		}
		e = prev
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	ob := &openBlob{path: path, f: f, refs: 1}
	ob.elem = b.lru.PushFront(ob)
	b.open[path] = ob
	return ob, nil
}

func (b *blobFiles) release(ob *openBlob) {
	b.mu.Lock()
	ob.refs--
	b.mu.Unlock()
}

// Close closes every file still open.
func (b *blobFiles) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ob := range b.open {
		ob.f.Close()
	}
	b.open = map[string]*openBlob{}
	b.lru.Init()
	return nil
}

// lazyBlob reads one layer file through its image's blobFiles.
type lazyBlob struct {
	files *blobFiles
	path  string
}

func (l *lazyBlob) ReadAt(p []byte, off int64) (int, error) {
	ob, err := l.files.acquire(l.path)
	if err != nil {
		return 0, err
	}
	defer l.files.release(ob)
	return ob.f.ReadAt(p, off)
}
