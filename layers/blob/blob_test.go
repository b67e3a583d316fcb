package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

func hashOf(b []byte) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(b))}
}

func layout(t *testing.T, blobs ...[]byte) blob.Layout {
	t.Helper()
	l := blob.Layout{Dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(l.Dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range blobs {
		if err := os.WriteFile(l.Path(hashOf(b)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func read(t *testing.T, src blob.Source, dg v1.Hash, off, n int64) (string, error) {
	t.Helper()
	rc, err := src.Open(context.Background(), dg, off, n)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

func TestLayoutOpen(t *testing.T) {
	data := []byte("0123456789")
	l := layout(t, data)
	dg := hashOf(data)
	for _, tc := range []struct {
		name    string
		dg      v1.Hash
		off, n  int64
		want    string
		wantErr string
	}{
		{name: "whole", dg: dg, n: -1, want: "0123456789"},
		{name: "range", dg: dg, off: 3, n: 4, want: "3456"},
		{name: "tail", dg: dg, off: 7, n: -1, want: "789"},
		{name: "missing", dg: hashOf([]byte("x")), n: -1, wantErr: "blob not found"},
		{name: "traversal", dg: v1.Hash{Algorithm: "sha256", Hex: "../../../etc/passwd"}, n: -1, wantErr: "not a sha256 digest"},
		{name: "short hex", dg: v1.Hash{Algorithm: "sha256", Hex: "abc"}, n: -1, wantErr: "not a sha256 digest"},
		{name: "upper hex", dg: v1.Hash{Algorithm: "sha256", Hex: strings.ToUpper(dg.Hex)}, n: -1, wantErr: "not a sha256 digest"},
		{name: "other algorithm", dg: v1.Hash{Algorithm: "sha512", Hex: dg.Hex}, n: -1, wantErr: "not a sha256 digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := read(t, l, tc.dg, tc.off, tc.n)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	// A directory where a blob should be is not a blob.
	d := []byte("dir")
	if err := os.Mkdir(l.Path(hashOf(d)), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := read(t, l, hashOf(d), 0, -1); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory blob: err = %v", err)
	}
}

func TestSections(t *testing.T) {
	file := strings.NewReader("headerAAAAmiddleBBBBtrailer")
	a, b := hashOf([]byte("AAAA")), hashOf([]byte("BBBB"))
	s := blob.Sections{a: {R: file, Off: 6, Size: 4}, b: {R: file, Off: 16, Size: 4}}
	if got, err := read(t, s, b, 0, -1); err != nil || got != "BBBB" {
		t.Fatalf("b = %q, %v", got, err)
	}
	if got, err := read(t, s, a, 1, 2); err != nil || got != "AA" {
		t.Fatalf("a[1:3] = %q, %v", got, err)
	}
	if _, err := read(t, s, a, 2, 3); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("a range past its end: err = %v", err)
	}
	if _, err := read(t, s, hashOf([]byte("C")), 0, -1); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("unknown digest: err = %v", err)
	}
}

func TestReadVerified(t *testing.T) {
	data := []byte(`{"config":true}`)
	other := []byte(`{"config":false}`)
	l := layout(t, data, other)
	// A file stored under another blob's digest (a rotted or swapped cache).
	swapped := hashOf([]byte("swapped"))
	if err := os.WriteFile(l.Path(swapped), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		dg      v1.Hash
		size    int64
		wantErr error
		errText string
	}{
		{name: "good", dg: hashOf(data), size: int64(len(data))},
		{name: "size too small", dg: hashOf(data), size: 3, wantErr: registry.ErrDigestMismatch},
		{name: "size too large", dg: hashOf(data), size: int64(len(data)) + 1, wantErr: registry.ErrSizeMismatch},
		{name: "content of another digest", dg: swapped, size: int64(len(data)), wantErr: registry.ErrDigestMismatch},
		{name: "over the limit", dg: hashOf(data), size: 1 << 30, errText: "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := blob.ReadVerified(ctx, l, tc.dg, tc.size, 1<<20)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			case tc.errText != "":
				if err == nil || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %q", err, tc.errText)
				}
			default:
				if err != nil || !bytes.Equal(b, data) {
					t.Fatalf("got %q, %v", b, err)
				}
			}
		})
	}
}

// slowSource answers each range after a delay that is longest for the
// first chunks, so chunks complete out of order.
type slowSource struct {
	data  []byte
	opens atomic.Int32
	fail  int64 // offset whose chunk fails (-1: none)
}

func (s *slowSource) Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error) {
	s.opens.Add(1)
	if off == s.fail {
		return nil, errors.New("injected failure")
	}
	time.Sleep(time.Duration(len(s.data)-int(off)) * time.Microsecond / 64)
	end := int64(len(s.data))
	if n >= 0 {
		end = off + n
	}
	return io.NopCloser(bytes.NewReader(s.data[off:end])), nil
}

func TestOrderedReader(t *testing.T) {
	data := make([]byte, 1<<20+12345)
	rand.New(rand.NewSource(1)).Read(data)
	for _, tc := range []struct {
		name        string
		off, chunk  int64
		par         int
		wantOpens   int32
		failAt      int64
		wantErrText string
	}{
		{name: "in order from chunks done out of order", chunk: 64 << 10, par: 4, wantOpens: 17, failAt: -1},
		{name: "resumed at an offset", off: 300000, chunk: 100000, par: 3, wantOpens: 8, failAt: -1},
		{name: "one connection", chunk: 1 << 20, par: 1, wantOpens: 2, failAt: -1},
		{name: "a failed chunk fails the read", chunk: 64 << 10, par: 4, failAt: 5 * 64 << 10, wantErrText: "bytes 327680-393215: injected failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &slowSource{data: data, fail: tc.failAt}
			r := blob.NewOrderedReader(context.Background(), src, hashOf(data), tc.off, int64(len(data)), tc.chunk, tc.par)
			got, err := io.ReadAll(r)
			r.Close()
			if tc.wantErrText != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Fatalf("err = %v, want %q", err, tc.wantErrText)
				}
				return
			}
			if err != nil || !bytes.Equal(got, data[tc.off:]) {
				t.Fatalf("read %d bytes (err %v), want %d equal to the blob from %d", len(got), err, len(data)-int(tc.off), tc.off)
			}
			if n := src.opens.Load(); n != tc.wantOpens {
				t.Errorf("%d range requests, want %d", n, tc.wantOpens)
			}
		})
	}
}

// A reader closed half way stops its fetches and returns.
func TestOrderedReaderClose(t *testing.T) {
	data := make([]byte, 4<<20)
	src := &slowSource{data: data, fail: -1}
	r := blob.NewOrderedReader(context.Background(), src, hashOf(data), 0, int64(len(data)), 64<<10, 4)
	if _, err := io.ReadFull(r, make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if n := src.opens.Load(); n >= 64 {
		t.Errorf("%d of 64 chunks fetched after a close at the second chunk", n)
	}
}

func TestMeterAndWait(t *testing.T) {
	var progress atomic.Int64
	for _, tc := range []struct{ bps, burst int64 }{{1 << 30, 1 << 20}, {6 << 20, 6 << 20 / 10}, {100 << 10, 32 << 10}, {1000, 1000}} {
		if got := blob.NewLimiter(tc.bps).Burst(); int64(got) != tc.burst {
			t.Errorf("NewLimiter(%d).Burst() = %d, want %d", tc.bps, got, tc.burst)
		}
	}
	l := blob.NewLimiter(1 << 30) // fast enough not to slow the test
	m := &blob.Meter{Ctx: context.Background(), R: bytes.NewReader(make([]byte, 3<<20)), Progress: &progress, Limit: l}
	n, err := io.CopyBuffer(io.Discard, m, make([]byte, 4<<20))
	if err != nil || n != 3<<20 || m.N != n || progress.Load() != n {
		t.Fatalf("copied %d (meter %d, progress %d), err %v", n, m.N, progress.Load(), err)
	}
	// Wait takes more than a burst in pieces instead of failing.
	if err := blob.Wait(context.Background(), l, 5<<20); err != nil {
		t.Fatal(err)
	}
	if blob.NewLimiter(0) != nil || blob.Wait(context.Background(), nil, 1<<40) != nil {
		t.Fatal("no rate must mean no limiter")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := blob.Wait(ctx, blob.NewLimiter(10), 100); err == nil {
		t.Fatal("a cancelled wait succeeded")
	}
}
