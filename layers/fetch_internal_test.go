package layers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
)

// faultyRegistry wraps go-containerregistry's in-process registry and
// injects the faults a fetcher must survive, per blob GET.
type faultyRegistry struct {
	mu     sync.Mutex
	next   http.Handler
	faults []string // consumed in order: "429", "503", "cut", "norange", "stall-head", "stall-body"
	ranges []string // Range headers seen on blob GETs
	served int64    // body bytes written for blob GETs
}

func (f *faultyRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
		f.next.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	f.ranges = append(f.ranges, r.Header.Get("Range"))
	fault := ""
	if len(f.faults) > 0 {
		fault, f.faults = f.faults[0], f.faults[1:]
	}
	f.mu.Unlock()
	switch fault {
	case "429":
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	case "503":
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case "norange":
		r.Header.Del("Range")
	case "stall-head":
		<-r.Context().Done() // until the client gives up
		return
	}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	if fault == "cut" || fault == "stall-body" {
		// Promise the whole body, send half, then drop the connection
		// (or go silent until the client gives up).
		w.WriteHeader(rec.Code)
		n, _ := w.Write(body[:len(body)/2])
		f.count(n)
		if fault == "stall-body" {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		hj, _ := w.(http.Hijacker)
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
		}
		return
	}
	w.WriteHeader(rec.Code)
	n, _ := w.Write(body)
	f.count(n)
}

func (f *faultyRegistry) count(n int) {
	f.mu.Lock()
	f.served += int64(n)
	f.mu.Unlock()
}

func pushBlob(t *testing.T, host, repo string, data []byte) v1.Hash {
	t.Helper()
	sum := sha256.Sum256(data)
	h := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	resp, err := http.Post(fmt.Sprintf("http://%s/v2/%s/blobs/uploads/?digest=%s", host, repo, h), "application/octet-stream", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %s", resp.Status)
	}
	return h
}

func TestFetcherFaults(t *testing.T) {
	ctx := context.Background()
	fr := &faultyRegistry{next: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	srv := httptest.NewServer(fr)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	data := bytes.Repeat([]byte("kiln-fetch-"), 50000) // 550 KB
	dgst := pushBlob(t, host, "kiln/blobs", data)

	var waits []time.Duration
	f, err := NewFetcher(ctx, host+"/kiln/blobs", nil, WithRetries(3, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	f.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }

	read := func(off, n int64) ([]byte, error) {
		rc, err := f.Open(ctx, dgst, off, n)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}

	t.Run("retries 429 honouring Retry-After, and 503", func(t *testing.T) {
		fr.faults = []string{"429", "503"}
		waits = nil
		got, err := read(0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("wrong bytes")
		}
		if len(waits) != 2 || waits[0] != 7*time.Second || waits[1] != 2*time.Millisecond {
			t.Fatalf("waits %v, want [7s 2ms]", waits)
		}
	})
	t.Run("gives up after the retries", func(t *testing.T) {
		fr.faults = []string{"503", "503", "503", "503", "503"}
		_, err := read(0, -1)
		if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "4 attempts") {
			t.Fatalf("err = %v", err)
		}
		fr.faults = nil
	})
	t.Run("a cut body is resumed by Range after a backoff", func(t *testing.T) {
		fr.faults = []string{"cut"}
		fr.ranges = nil
		waits = nil
		got, err := read(0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("resumed bytes differ")
		}
		if len(fr.ranges) != 2 || fr.ranges[0] != "" || !strings.HasPrefix(fr.ranges[1], fmt.Sprintf("bytes=%d-", len(data)/2)) {
			t.Fatalf("Range headers %q, want a GET then bytes=%d-", fr.ranges, len(data)/2)
		}
		if len(waits) != 1 || waits[0] != time.Millisecond {
			t.Fatalf("waits %v, want one backoff of 1ms before resuming (the policy 5xx get)", waits)
		}
	})
	t.Run("a body that keeps breaking fails after the retries", func(t *testing.T) {
		fr.faults = []string{"cut", "cut", "cut", "cut"}
		waits = nil
		_, err := read(0, -1)
		if err == nil || !strings.Contains(err.Error(), "4 attempts") {
			t.Fatalf("err = %v, want a failure after 4 attempts", err)
		}
		if len(waits) != 3 || waits[2] != 4*time.Millisecond {
			t.Fatalf("waits %v, want 1ms 2ms 4ms", waits)
		}
		fr.faults = nil
	})
	t.Run("chunk", func(t *testing.T) {
		got, err := read(1000, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[1000:1000+4096]) {
			t.Fatal("chunk differs")
		}
	})
	t.Run("registry ignoring Range", func(t *testing.T) {
		fr.faults = []string{"norange"}
		got, err := read(1000, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[1000:1000+4096]) {
			t.Fatal("chunk differs")
		}
	})
	t.Run("size and unknown blob", func(t *testing.T) {
		n, err := f.Size(ctx, dgst)
		if err != nil || n != int64(len(data)) {
			t.Fatalf("Size = %d, %v", n, err)
		}
		missing := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
		if _, err := f.Open(ctx, missing, 0, -1); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("missing blob: %v", err)
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {"-1", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// F5, F9: a registry that stalls (before its answer or mid-body) or drops
// the connection mid-body costs an idle timeout, then the read resumes by
// Range with the retry policy's backoff: for Fetcher users (warm, weights)
// and for layer walks (analyze, slim) alike.
func TestStalledAndBrokenBodiesResume(t *testing.T) {
	for _, faults := range [][]string{{"stall-head"}, {"stall-body"}, {"cut"}, {"stall-body", "cut"}} {
		t.Run(strings.Join(faults, "+"), func(t *testing.T) {
			fr := &faultyRegistry{next: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
			srv := httptest.NewServer(fr)
			defer srv.Close()
			host := strings.TrimPrefix(srv.URL, "http://")
			tarb := testimage.Tar(t, []testimage.Entry{testimage.Sized("data/blob", 300_000)})
			layer := testimage.RawLayer(tarb, types.OCIUncompressedLayer)
			ref := host + "/kiln/faults:x"
			testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, layer))
			dgst, _ := layer.Digest()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			opts := []Option{WithIdleTimeout(150 * time.Millisecond), WithFetchOptions(WithRetries(3, time.Millisecond))}

			fr.faults = append([]string(nil), faults...)
			f, err := NewFetcher(ctx, ref, opts)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := f.Open(ctx, dgst, 0, int64(len(tarb)))
			if err != nil {
				t.Fatalf("fetcher: %v", err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, tarb) {
				t.Fatalf("fetcher: %d bytes, %v; want the blob", len(got), err)
			}

			img, err := Open(ctx, ref, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			fr.faults = append([]string(nil), faults...) // for the layer blob, not the config
			st, err := img.Layers[0].Walk(ctx, WalkOptions{}, func(*Entry, io.Reader) error { return nil })
			if err != nil || !st.Verified {
				t.Fatalf("walk: %+v %v", st, err)
			}
			if len(fr.faults) != 0 {
				t.Errorf("faults %q not reached", fr.faults)
			}
		})
	}
}

// F5: with no retries left, a stalled body fails with ErrIdleTimeout after
// about the idle timeout, never hangs.
func TestStalledBodyFailsAfterIdleTimeout(t *testing.T) {
	fr := &faultyRegistry{next: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	srv := httptest.NewServer(fr)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	data := bytes.Repeat([]byte("stall-"), 50000)
	dgst := pushBlob(t, host, "kiln/blobs", data)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := NewFetcher(ctx, host+"/kiln/blobs", []Option{WithIdleTimeout(100 * time.Millisecond)}, WithRetries(0, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	fr.faults = []string{"stall-body"}
	start := time.Now()
	rc, err := f.Open(ctx, dgst, 0, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, ErrIdleTimeout) {
		t.Fatalf("err = %v, want ErrIdleTimeout", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("took %v for a 100ms idle timeout", el)
	}
}
