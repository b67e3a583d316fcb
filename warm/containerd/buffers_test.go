package containerd

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/layers/blob"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestDecodedLayerReusesBuffers: the in-process apply of --unpack's direct
// path decodes a layer through a fixed set of reused buffers: a 64 MiB tar
// stream allocates a few MiB, not a new MiB per MiB decoded, so a 2 GiB
// layer does not drive the heap up (F10).
func TestDecodedLayerReusesBuffers(t *testing.T) {
	const size = 64 << 20
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.Write(make([]byte, size))
	zw.Close()
	p := filepath.Join(t.TempDir(), "layer.gz")
	if err := os.WriteFile(p, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	alloc := allocated(func() {
		ra, err := decodedProvider{src: sizedFile{f, int64(gz.Len())}}.ReaderAt(context.Background(), ocispec.Descriptor{})
		if err != nil {
			t.Fatal(err)
		}
		defer ra.Close()
		buf := make([]byte, 32<<10)
		for {
			k, err := ra.ReadAt(buf, n)
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	if n != size {
		t.Fatalf("decoded %d bytes, want %d", n, size)
	}
	if alloc > 20<<20 {
		t.Errorf("decoding %d MiB allocated %d MiB; want the buffers reused (about 10 MiB)", size>>20, alloc>>20)
	}
}

// zeroSource serves zeros for any range.
type zeroSource struct{}

func (zeroSource) Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error) {
	return io.NopCloser(io.LimitReader(zeroReader{}, n)), nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestChunkedReaderReusesBuffers: a large blob's Range chunks go through
// (par+2) buffers reused for the whole blob: 128 MiB in 1 MiB chunks
// allocates a few MiB (F10).
func TestChunkedReaderReusesBuffers(t *testing.T) {
	const size, chunk, par = 128 << 20, 1 << 20, 4
	var n int64
	alloc := allocated(func() {
		cr := blob.NewOrderedReader(context.Background(), zeroSource{}, v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}, 0, size, chunk, par)
		defer cr.Close()
		k, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{cr}, make([]byte, 32<<10))
		if err != nil {
			t.Fatal(err)
		}
		n = k
	})
	if n != size {
		t.Fatalf("read %d bytes, want %d", n, size)
	}
	if alloc > 16<<20 {
		t.Errorf("reading %d MiB in %d MiB chunks allocated %d MiB; want (par+2) chunks reused", size>>20, chunk>>20, alloc>>20)
	}
}
