package blob_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

// countingSource serves data, counts the bytes it hands out, and can fail
// (once) the range that starts at failAt or flip a byte of every answer.
type countingSource struct {
	data    []byte
	served  atomic.Int64
	failAt  atomic.Int64
	corrupt bool
}

func newCounting(data []byte) *countingSource {
	s := &countingSource{data: data}
	s.failAt.Store(-1)
	return s
}

func (s *countingSource) Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error) {
	if s.failAt.CompareAndSwap(off, -1) {
		return nil, errors.New("injected failure")
	}
	end := int64(len(s.data))
	if n >= 0 {
		end = off + n
	}
	b := append([]byte(nil), s.data[off:end]...)
	if s.corrupt && len(b) > 0 {
		b[len(b)/2] ^= 1
	}
	s.served.Add(int64(len(b)))
	return io.NopCloser(bytesReader(b)), nil
}

func bytesReader(b []byte) io.Reader { return &sliceReader{b: b} }

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func newDir(t *testing.T) blob.Dir {
	d := t.TempDir()
	return blob.Dir{Root: filepath.Join(d, "blobs"), Partial: filepath.Join(d, "partial"), Stamps: true}
}

func copyInto(ctx context.Context, d blob.Dir, src blob.Source, dg v1.Hash, size int64, o blob.CopyOptions) (blob.CopyResult, error) {
	open := func(ctx context.Context) (blob.Writer, error) { return d.Writer(ctx, dg, size) }
	return blob.Copy(ctx, open, src, dg, size, o)
}

// leavePartial writes b as blob dg's partial, what an earlier run left
// (nothing when b is nil).
func leavePartial(t *testing.T, d blob.Dir, dg v1.Hash, b []byte) {
	t.Helper()
	if b == nil {
		return
	}
	os.MkdirAll(d.Partial, 0o755)
	if err := os.WriteFile(d.PartialPath(dg), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func TestDirCopy(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(3<<20+17, 1)
	dg, size := hashOf(data), int64(len(data))
	stream := blob.CopyOptions{Attempts: 2}
	chunks := blob.CopyOptions{Attempts: 2, Fill: blob.FillOptions{Chunk: 256 << 10, Conns: 3}}
	for _, tc := range []struct {
		name string
		o    blob.CopyOptions
		// partial is what an earlier run left (nil: nothing).
		partial    []byte
		wantServed int64
	}{
		{name: "one stream", o: stream, wantServed: size},
		{name: "chunks", o: chunks, wantServed: size},
		{name: "stream resumes", o: stream, partial: data[:1<<20], wantServed: size - 1<<20},
		{name: "chunks resume a stream's partial", o: chunks, partial: data[:1<<20], wantServed: size - 1<<20},
		// F1: a partial longer than the blob is never trusted.
		{name: "stream: partial longer than the blob", o: stream, partial: append(append([]byte(nil), data...), "extra"...), wantServed: size},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDir(t)
			leavePartial(t, d, dg, tc.partial)
			src := newCounting(data)
			res, err := copyInto(ctx, d, src, dg, size, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := src.served.Load(); got != tc.wantServed || res.Fetched != got {
				t.Errorf("served %d bytes (result says %d), want %d", got, res.Fetched, tc.wantServed)
			}
			b, err := os.ReadFile(d.Path(dg))
			if err != nil || string(b) != string(data) {
				t.Fatalf("committed blob: %d bytes, err %v; want the %d bytes of the blob", len(b), err, size)
			}
			if ok, err := d.Has(ctx, dg, size); !ok || err != nil {
				t.Fatalf("Has = %v, %v", ok, err)
			}
			if _, err := os.Stat(d.PartialPath(dg)); !os.IsNotExist(err) {
				t.Errorf("partial left after the commit: %v", err)
			}
			// A second copy finds it committed and moves nothing.
			src.served.Store(0)
			if res, err := copyInto(ctx, d, src, dg, size, tc.o); err != nil || !res.Exists || src.served.Load() != 0 {
				t.Errorf("second copy: %+v, %v, served %d", res, err, src.served.Load())
			}
		})
	}
}

// A broken chunk keeps the others: the record says what is on disk, and
// the next copy fetches only the rest.
func TestDirCopyChunksResume(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(2<<20, 2)
	dg, size := hashOf(data), int64(len(data))
	d := newDir(t)
	src := newCounting(data)
	src.failAt.Store(5 * 128 << 10)
	o := blob.CopyOptions{Attempts: 1, Fill: blob.FillOptions{Chunk: 128 << 10, Conns: 1}}
	if _, err := copyInto(ctx, d, src, dg, size, o); err == nil {
		t.Fatal("a failed chunk committed the blob")
	}
	done, ok := blob.ReadRanges(d.PartialPath(dg), size)
	if !ok || done.Bytes() == 0 || done.Bytes() == size {
		t.Fatalf("record after the failure: %v (ok %v)", done, ok)
	}
	before := src.served.Load()
	if _, err := copyInto(ctx, d, src, dg, size, o); err != nil {
		t.Fatal(err)
	}
	if again := src.served.Load() - before; again != size-done.Bytes() {
		t.Errorf("the rerun fetched %d bytes, want the %d missing", again, size-done.Bytes())
	}
	if _, err := os.Stat(blob.RangesPath(d.PartialPath(dg))); !os.IsNotExist(err) {
		t.Errorf("record left after the commit: %v", err)
	}
}

// Bytes that do not hash to the digest are never committed, whatever the
// strategy, and are not kept for a resume.
func TestDirCopyCorrupt(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(1<<20, 3)
	dg, size := hashOf(data), int64(len(data))
	for _, o := range []blob.CopyOptions{{Attempts: 2}, {Attempts: 2, Fill: blob.FillOptions{Chunk: 64 << 10, Conns: 2}}} {
		d := newDir(t)
		src := newCounting(data)
		src.corrupt = true
		_, err := copyInto(ctx, d, src, dg, size, o)
		if !errors.Is(err, registry.ErrDigestMismatch) {
			t.Fatalf("err = %v, want a digest mismatch", err)
		}
		if got := src.served.Load(); got != 2*size {
			t.Errorf("served %d bytes, want the blob twice (2 attempts, each from zero)", got)
		}
		for _, p := range []string{d.Path(dg), d.PartialPath(dg), blob.RangesPath(d.PartialPath(dg))} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s exists after a corrupt copy: %v", p, err)
			}
		}
	}
}

// Has trusts a file kiln verified only while it is unchanged: one flipped
// in place (a rotting cache) is missing again.
func TestDirHasStamps(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(64<<10, 4)
	dg, size := hashOf(data), int64(len(data))
	d := newDir(t)
	if _, err := copyInto(ctx, d, newCounting(data), dg, size, blob.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d.Path(dg), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{data[100] ^ 0xff}, 100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if ok, err := d.Has(ctx, dg, size); ok || err != nil {
		t.Fatalf("Has of a corrupted blob = %v, %v; want false", ok, err)
	}
	if ok, _ := d.Has(ctx, dg, size+1); ok {
		t.Fatal("Has with another size")
	}
}

// Two writers of one blob: the second waits for the first's lock, then
// finds the blob committed.
func TestDirConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(4<<20, 5)
	dg, size := hashOf(data), int64(len(data))
	d := newDir(t)
	src := newCounting(data)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = copyInto(ctx, d, src, dg, size, blob.CopyOptions{Fill: blob.FillOptions{Chunk: 512 << 10, Conns: 2}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if got := src.served.Load(); got != size {
		t.Errorf("served %d bytes, want the blob once", got)
	}
	if ok, _ := d.Has(ctx, dg, size); !ok {
		t.Fatal("blob not committed")
	}
}

// Held, Remove and Empty are what a stage's owner needs of a Dir (kiln
// warm's docker stage): the bytes held for a preflight, a blob gone with
// its partial, ranges record and verified record, and whether anything
// is left, without knowing those files' names.
func TestDirHeldRemoveEmpty(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	if empty, err := d.Empty(); err != nil || !empty {
		t.Fatalf("a new Dir: empty=%v err=%v", empty, err)
	}
	data := randomBytes(1<<20, 7)
	dg, size := hashOf(data), int64(len(data))
	if n := d.Held(dg, size); n != 0 {
		t.Fatalf("held %d bytes of a blob never written", n)
	}
	// An interrupted writer's partial counts, and is someone's bytes.
	w, err := d.Writer(ctx, dg, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:300<<10]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if n := d.Held(dg, size); n != 300<<10 {
		t.Errorf("held %d bytes of a partial of %d", n, 300<<10)
	}
	if empty, _ := d.Empty(); empty {
		t.Error("a Dir holding a partial is empty")
	}
	// A chunked partial and its ranges record, then the committed blob
	// and its verified record.
	other := randomBytes(2<<20, 8)
	odg, osize := hashOf(other), int64(len(other))
	src := newCounting(other)
	src.failAt.Store(5 * 128 << 10)
	if _, err := copyInto(ctx, d, src, odg, osize, blob.CopyOptions{Attempts: 1, Fill: blob.FillOptions{Chunk: 128 << 10, Conns: 1}}); err == nil {
		t.Fatal("a failed chunk committed the blob")
	}
	if _, err := copyInto(ctx, d, newCounting(data), dg, size, blob.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.Has(ctx, dg, size); !ok || err != nil || d.Held(dg, size) != size {
		t.Fatalf("committed blob: has=%v held=%d err=%v", ok, d.Held(dg, size), err)
	}
	if err := os.WriteFile(filepath.Join(d.Partial, "index.lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, h := range []v1.Hash{dg, odg} {
		if err := d.Remove(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Remove(dg); err != nil {
		t.Errorf("removing a blob that is not there: %v", err)
	}
	if ok, _ := d.Has(ctx, dg, size); ok || d.Held(dg, size) != 0 || d.Held(odg, osize) != 0 {
		t.Errorf("after Remove: has=%v held=%d, %d", ok, d.Held(dg, size), d.Held(odg, osize))
	}
	if empty, err := d.Empty("index.lock"); err != nil || !empty {
		es, _ := os.ReadDir(d.Partial)
		t.Errorf("after removing every blob: empty=%v err=%v (partial dir: %v)", empty, err, es)
	}
	if empty, _ := d.Empty(); empty {
		t.Error("a file the caller does not own counts as nothing")
	}
}

// memWriter is a Writer that is not a file: what an earlier writer left
// (kept) cannot be read back, as with containerd's ingest.
type memWriter struct {
	kept, buf []byte
	dg        v1.Hash
}

func (w *memWriter) Write(p []byte) (int, error) { w.buf = append(w.buf, p...); return len(p), nil }
func (w *memWriter) Offset() int64               { return int64(len(w.kept)) }
func (w *memWriter) Close() error                { return nil }
func (w *memWriter) Abort(context.Context) error { return nil }
func (w *memWriter) Commit(context.Context) error {
	if got := hashOf(append(append([]byte(nil), w.kept...), w.buf...)); got != w.dg {
		return registry.ErrDigestMismatch
	}
	return nil
}

// Follow sees every byte of the blob in order, from the first, whenever
// the committing try can hand them all on (a file writer reads back what
// it resumes), and says so; a try that resumes bytes it cannot read back
// is not followed.
func TestCopyFollow(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(3<<20+17, 4)
	dg, size := hashOf(data), int64(len(data))
	stream := blob.CopyOptions{Attempts: 2}
	chunks := blob.CopyOptions{Attempts: 2, Fill: blob.FillOptions{Chunk: 256 << 10, Conns: 3}}
	ordered := blob.CopyOptions{Attempts: 2, ChunkSize: 256 << 10, ChunkThreshold: 1 << 20, Chunks: 3}
	for _, tc := range []struct {
		name     string
		o        blob.CopyOptions
		mem      bool
		partial  []byte
		followed bool
	}{
		{name: "file, one stream", o: stream, followed: true},
		{name: "file, chunks", o: chunks, followed: true},
		{name: "file, stream resumes", o: stream, partial: data[:1<<20], followed: true},
		{name: "file, chunks resume", o: chunks, partial: data[:1<<20], followed: true},
		{name: "writer, one stream", o: stream, mem: true, followed: true},
		{name: "writer, ordered chunks", o: ordered, mem: true, followed: true},
		{name: "writer resumes", o: stream, mem: true, partial: data[:1<<20], followed: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var open func(context.Context) (blob.Writer, error)
			if tc.mem {
				open = func(context.Context) (blob.Writer, error) { return &memWriter{kept: tc.partial, dg: dg}, nil }
			} else {
				d := newDir(t)
				leavePartial(t, d, dg, tc.partial)
				open = func(ctx context.Context) (blob.Writer, error) { return d.Writer(ctx, dg, size) }
			}
			var seen *bytes.Buffer
			calls := 0
			tc.o.Follow = func() io.Writer { calls++; seen = &bytes.Buffer{}; return seen }
			res, err := blob.Copy(ctx, open, newCounting(data), dg, size, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if res.Followed != tc.followed {
				t.Fatalf("Followed = %v, want %v (Follow called %d times)", res.Followed, tc.followed, calls)
			}
			if tc.followed && !bytes.Equal(seen.Bytes(), data) {
				t.Fatalf("the follower saw %d bytes, not the blob's %d in order", seen.Len(), size)
			}
		})
	}
}

// A follower that fails never fails the copy it follows.
func TestCopyFollowerErrorIgnored(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(1<<20, 5)
	dg, size := hashOf(data), int64(len(data))
	for _, o := range []blob.CopyOptions{{}, {Fill: blob.FillOptions{Chunk: 64 << 10, Conns: 2}}} {
		o.Follow = func() io.Writer { return failWriter{} }
		if _, err := copyInto(ctx, newDir(t), newCounting(data), dg, size, o); err != nil {
			t.Fatal(err)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("follower failed") }
