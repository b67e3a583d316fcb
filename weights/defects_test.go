package weights

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/layers/blob"
)

// F1: a partial longer than its blob (a previous run for another volume, a
// bad copy) must be cut to the blob's size before it is hashed and renamed:
// only the recorded bytes count, and no extra byte reaches the volume.
func TestPullTruncatesLongPartial(t *testing.T) {
	ctx := context.Background()
	large := testFile{"m/big.safetensors", body("long partial", 4<<20+3), 0o644}
	s := &rangeServer{blob: "sha256:" + hexOf(large.data)}
	res := publishBehind(t, s, []testFile{large})
	size := int64(len(large.data))
	for _, tc := range []struct {
		name string
		done blob.Ranges
	}{
		{"complete record", blob.Ranges{{0, size}}},
		{"half record", blob.Ranges{{0, 2 << 20}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, PartialDir), 0o755)
			part := filepath.Join(dir, PartialDir, hexOf(large.data)+".part")
			long := append(append([]byte(nil), large.data...), []byte("EXTRA BYTES PAST THE BLOB")...)
			if err := os.WriteFile(part, long, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := blob.WriteRanges(part, size, tc.done); err != nil {
				t.Fatal(err)
			}
			if _, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{ChunkSize: 1 << 20}); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(dir, ModelDir, "big.safetensors"))
			if err != nil || fi.Size() != size {
				t.Fatalf("committed file: %v %v, want %d bytes", fi, err, size)
			}
			if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
				t.Errorf("volume: %+v %v", rep, err)
			}
		})
	}
}

// F2: a volume whose marker is there but whose files are not (removed,
// truncated, rewritten) is healed by the next pull, not reported ready.
func TestPullHealsDamagedReadyVolume(t *testing.T) {
	ctx := context.Background()
	res, _ := publishLayout(t, modelFiles)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, file string)
	}{
		{"missing", func(t *testing.T, file string) { os.Remove(file) }},
		{"truncated", func(t *testing.T, file string) { os.Truncate(file, 100) }},
		{"rewritten", func(t *testing.T, file string) {
			f, err := os.OpenFile(file, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("tampered"), 1000)
			f.Close()
			// After the marker, whatever the clock's granularity.
			later := time.Now().Add(2 * time.Second)
			os.Chtimes(file, later, later)
		}},
		{"manifest gone", func(t *testing.T, file string) {
			os.Remove(filepath.Join(filepath.Dir(file), "..", "..", ManifestFile))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{}); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, filepath.Join(dir, ModelDir, "llm/model-00002.safetensors"))
			r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.AlreadyReady {
				t.Fatal("a damaged volume was reported already ready")
			}
			if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
				t.Errorf("after the healing pull: %+v %v", rep, err)
			}
			if r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{}); err != nil || !r.AlreadyReady {
				t.Errorf("healed volume not ready: %+v %v", r, err)
			}
		})
	}
}

// D11: bit rot that keeps a file's size and modification time passes the
// cheap stat check; a plain pull (what the Kubernetes init container runs)
// must still find it, heal it and not say "already ready". --quick
// (TrustMarker) is the documented way to skip the hashing.
func TestPullHealsBitRotKeepingTimes(t *testing.T) {
	ctx := context.Background()
	res, _ := publishLayout(t, modelFiles)
	dir := t.TempDir()
	if _, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, ModelDir, "llm/model-00002.safetensors")
	rot := func() {
		t.Helper()
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(file, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		f.ReadAt(b, 1000)
		b[0] ^= 0x01 // one bit flipped, size unchanged
		if _, err := f.WriteAt(b, 1000); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	rot()
	if r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{TrustMarker: true}); err != nil || !r.AlreadyReady || r.Verified {
		t.Fatalf("TrustMarker: the stat check alone decides (ready, unverified): %+v %v", r, err)
	}
	r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{})
	if err != nil || r.AlreadyReady || r.Fetched == 0 || r.Present != len(modelFiles)-1 {
		t.Fatalf("a plain pull over bit rot must heal it: %+v %v", r, err)
	}
	if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
		t.Fatalf("after the healing pull: %+v %v", rep, err)
	}
	if r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{}); err != nil || !r.AlreadyReady || !r.Verified || r.Fetched != 0 || r.Present != len(modelFiles) {
		t.Fatalf("a healed volume is ready, verified: %+v %v", r, err)
	}
	// Recheck (warm, after its own Verify found the file) heals too.
	rot()
	r, err = Pull(ctx, res.Manifest, res.Source, dir, PullOptions{Recheck: true})
	if err != nil || r.AlreadyReady || r.Fetched == 0 {
		t.Fatalf("Recheck: %+v %v", r, err)
	}
	if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
		t.Errorf("after the rechecking pull: %+v %v", rep, err)
	}
	if !r.Verified {
		t.Errorf("a pull that fetched and committed says its files were not all hashed: %+v", r)
	}
	// Recheck with the files its caller hashed a moment ago (Good): those
	// are not hashed again (a volume is hashed once per warm), the rest are.
	// The proof: a file rotted after the caller hashed it stays as it is.
	rot()
	other := filepath.Join(dir, ModelDir, "llm/model-00001.safetensors")
	if err := os.WriteFile(other, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = Pull(ctx, res.Manifest, res.Source, dir, PullOptions{Recheck: true, Good: map[string]bool{"llm/model-00002.safetensors": true}})
	if err != nil || !r.Verified || r.Fetched == 0 {
		t.Fatalf("Recheck with Good: %+v %v", r, err)
	}
	rep, err := Verify(ctx, dir, nil, 1)
	if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Path != "llm/model-00002.safetensors" {
		t.Fatalf("after Recheck with Good: want the Good file alone left as it was (not hashed), the other healed: %+v %v", rep, err)
	}
}

// barrierSource holds the first opens until two are in flight (or a short
// wait passes) and records how many were ever in flight at once.
type barrierSource struct {
	blob.Source
	mu          sync.Mutex
	inflight    int
	maxInflight int
	arrived     chan struct{}
}

type closeFunc struct {
	io.Reader
	close func() error
}

func (c closeFunc) Close() error { return c.close() }

func (s *barrierSource) Open(ctx context.Context, d v1.Hash, off, n int64) (io.ReadCloser, error) {
	s.mu.Lock()
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	s.mu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	case <-time.After(300 * time.Millisecond):
	}
	rc, err := s.Source.Open(ctx, d, off, n)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return closeFunc{rc, func() error {
		once.Do(func() {
			s.mu.Lock()
			s.inflight--
			s.mu.Unlock()
		})
		return rc.Close()
	}}, nil
}

// F4: two pulls into one directory: the second waits for the first's lock
// and then finds the volume ready; neither sees the other's files vanish.
func TestPullConcurrentSameDir(t *testing.T) {
	ctx := context.Background()
	one := []testFile{{"m/only.safetensors", body("concurrent", 2<<20), 0o644}}
	res, _ := publishLayout(t, one)
	src := &barrierSource{Source: res.Source, arrived: make(chan struct{})}
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	results := make([]*PullResult, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Pull(ctx, res.Manifest, src, dir, PullOptions{ChunkSize: -1})
			if errs[i] == nil {
				for _, f := range []string{ReadyMarker, ManifestFile} {
					if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
						t.Errorf("pull %d returned without %s: %v", i, f, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("pull %d: %v", i, err)
		}
	}
	if src.maxInflight > 1 {
		t.Errorf("%d transfers of the one blob ran at once: the pulls were not serialised", src.maxInflight)
	}
	if errs[0] == nil && errs[1] == nil && !results[0].AlreadyReady && !results[1].AlreadyReady {
		t.Errorf("both pulls fetched: %+v %+v", results[0], results[1])
	}
	if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
		t.Errorf("volume: %+v %v", rep, err)
	}
}

// A pull whose wait for the lock ends says so by name.
func TestPullLockWaitEnds(t *testing.T) {
	res, _ := publishLayout(t, modelFiles)
	dir := t.TempDir()
	unlock, err := lockVolume(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	waited := false
	_, err = Pull(ctx, res.Manifest, res.Source, dir, PullOptions{OnWait: func() { waited = true }})
	if !errors.Is(err, ErrVolumeBusy) || !waited {
		t.Fatalf("err = %v (waited %v), want ErrVolumeBusy after waiting", err, waited)
	}
}

// F9: a transfer that arrives corrupted once (a bad proxy, a flipped bit)
// is fetched again, a bounded number of times, as warm does; only a
// source that keeps sending bad bytes fails the pull.
func TestPullRetriesCorruptTransfer(t *testing.T) {
	for _, chunk := range []int64{1 << 20, -1} {
		t.Run(fmt.Sprintf("chunk %d", chunk), func(t *testing.T) {
			ctx := context.Background()
			large := testFile{"m/big.safetensors", body("flipped once", 4<<20+9), 0o644}
			var once sync.Once
			s := &rangeServer{blob: "sha256:" + hexOf(large.data), corrupt: func(string) bool {
				bad := false
				once.Do(func() { bad = true })
				return bad
			}}
			res := publishBehind(t, s, []testFile{large})
			dir := t.TempDir()
			if _, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{ChunkSize: chunk}); err != nil {
				t.Fatalf("one corrupted transfer failed the pull: %v", err)
			}
			if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
				t.Errorf("volume: %+v %v", rep, err)
			}
		})
	}
}
