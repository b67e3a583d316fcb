package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/networds"
	"github.com/kiln-build/kiln/internal/testimage"
)

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
	fr, host := testimage.FaultyRegistry(t)
	data := bytes.Repeat([]byte("kiln-fetch-"), 50000) // 550 KB
	dgst := pushBlob(t, host, "kiln/blobs", data)

	var waits []time.Duration
	f, err := NewClient(ctx, host+"/kiln/blobs", nil, WithRetries(3, time.Millisecond))
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
		fr.Faults = []string{"429", "503"}
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
		fr.Faults = []string{"503", "503", "503", "503", "503"}
		_, err := read(0, -1)
		if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "4 attempts") {
			t.Fatalf("err = %v", err)
		}
		fr.Faults = nil
	})
	t.Run("a cut body is resumed by Range after a backoff", func(t *testing.T) {
		fr.Faults = []string{"cut"}
		fr.Ranges = nil
		waits = nil
		got, err := read(0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("resumed bytes differ")
		}
		if len(fr.Ranges) != 2 || fr.Ranges[0] != "" || !strings.HasPrefix(fr.Ranges[1], fmt.Sprintf("bytes=%d-", len(data)/2)) {
			t.Fatalf("Range headers %q, want a GET then bytes=%d-", fr.Ranges, len(data)/2)
		}
		if len(waits) != 1 || waits[0] != time.Millisecond {
			t.Fatalf("waits %v, want one backoff of 1ms before resuming (the policy 5xx get)", waits)
		}
	})
	t.Run("a body that keeps breaking fails after the retries", func(t *testing.T) {
		fr.Faults = []string{"cut", "cut", "cut", "cut"}
		waits = nil
		_, err := read(0, -1)
		if err == nil || !strings.Contains(err.Error(), "4 attempts") {
			t.Fatalf("err = %v, want a failure after 4 attempts", err)
		}
		if len(waits) != 3 || waits[2] != 4*time.Millisecond {
			t.Fatalf("waits %v, want 1ms 2ms 4ms", waits)
		}
		fr.Faults = nil
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
		fr.Faults = []string{"norange"}
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
// Range with the retry policy's backoff: for Client users (warm, weights)
// and for layer walks (analyze, slim) alike.
// The idle timeout is a second, not 150 ms: the faulty registry answers
// a retry only once it has the whole blob in hand, and under the race
// detector beside CI's other tiers that took longer than 150 ms four times
// running (a failed run of this stop).
func TestStalledAndBrokenBodiesResume(t *testing.T) {
	for _, faults := range testimage.ResumeFaults {
		t.Run(strings.Join(faults, "+"), func(t *testing.T) {
			im := testimage.PushFaultyImage(t)
			fr, ref, tarb := im.Faulty, im.Ref, im.Tar
			dgst, _ := im.Layer.Digest()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			opts := []Option{WithIdleTimeout(time.Second), WithFetchOptions(WithRetries(3, time.Millisecond))}

			fr.Faults = append([]string(nil), faults...)
			f, err := NewClient(ctx, ref, opts)
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

			if len(fr.Faults) != 0 {
				t.Errorf("faults %q not reached", fr.Faults)
			}
		})
	}
}

// F5: with no retries left, a stalled body fails with networds.ErrIdleTimeout after
// about the idle timeout, never hangs. The idle timeout is long enough
// that a loaded machine (CI's tiers side by side) still answers the
// request itself in time: what stalls is the body.
func TestStalledBodyFailsAfterIdleTimeout(t *testing.T) {
	fr, host := testimage.FaultyRegistry(t)
	data := bytes.Repeat([]byte("stall-"), 50000)
	dgst := pushBlob(t, host, "kiln/blobs", data)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := NewClient(ctx, host+"/kiln/blobs", []Option{WithIdleTimeout(time.Second)}, WithRetries(0, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	fr.Faults = []string{"stall-body"}
	start := time.Now()
	rc, err := f.Open(ctx, dgst, 0, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, networds.ErrIdleTimeout) {
		t.Fatalf("err = %v, want networds.ErrIdleTimeout", err)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("took %v for a 1s idle timeout", el)
	}
}
