package weights

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/registry"

	kregistry "github.com/kiln-build/kiln/registry"

	"github.com/kiln-build/kiln/layers/blob"
)

// rangeServer fronts an in-process registry and tampers with GETs of blob
// (every blob when empty): cut(rng) >= 0 sends that many bytes of the
// answer and drops the connection, corrupt(rng) flips a byte. It records
// each Range header, the blob bytes sent and the most requests in flight.
type rangeServer struct {
	h       http.Handler
	blob    string
	cut     func(rng string) int64
	corrupt func(rng string) bool
	delay   time.Duration

	mu          sync.Mutex
	ranges      []string
	sent        int64
	inflight    int
	maxInflight int
}

func (s *rangeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/sha256:") ||
		(s.blob != "" && !strings.HasSuffix(r.URL.Path, "/blobs/"+s.blob)) {
		s.h.ServeHTTP(w, r)
		return
	}
	rng := r.Header.Get("Range")
	s.mu.Lock()
	s.ranges = append(s.ranges, rng)
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	time.Sleep(s.delay)
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if s.corrupt != nil && s.corrupt(rng) && len(body) > 100 {
		body = append([]byte(nil), body...)
		body[100] ^= 0xff
	}
	cut := int64(-1)
	if s.cut != nil {
		cut = s.cut(rng)
	}
	if cut >= 0 && cut < int64(len(body)) {
		body = body[:cut]
	}
	w.WriteHeader(rec.Code)
	w.Write(body)
	s.mu.Lock()
	s.sent += int64(len(body))
	s.mu.Unlock()
	if cut >= 0 {
		w.(http.Flusher).Flush()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}
}

// reset returns what was recorded and starts afresh, once the answers to
// a cancelled run's requests are finished (they count for that run).
func (s *rangeServer) reset() ([]string, int64) {
	for i := 0; i < 500; i++ {
		s.mu.Lock()
		idle := s.inflight == 0
		s.mu.Unlock()
		if idle {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, n := s.ranges, s.sent
	s.ranges, s.sent, s.maxInflight = nil, 0, 0
	return r, n
}

// publishBehind publishes files to an in-process registry behind s and
// resolves the artifact through it.
func publishBehind(t *testing.T, s *rangeServer, files []testFile) *Resolved {
	t.Helper()
	ctx := context.Background()
	s.h = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/kiln-weights/chunks:v1"
	if _, _, err := collect(t, files, WithLargeFileThreshold(1<<20)).Publish(ctx, testkit.Ref(t, ref), "", ""); err != nil {
		t.Fatal(err)
	}
	// No retries inside the Fetcher: these tests cut a transfer to see
	// what a run leaves for the next (layers tests the in-run resume).
	res, err := Resolve(ctx, ref, "", noFetchRetries)
	if err != nil {
		t.Fatal(err)
	}
	s.reset()
	return res
}

var noFetchRetries = kregistry.WithFetchOptions(kregistry.WithRetries(0, time.Millisecond))

// rangeStart reads N from "bytes=N-M".
func rangeStart(rng string) int64 {
	var a, b int64
	fmt.Sscanf(rng, "bytes=%d-%d", &a, &b)
	return a
}

func TestPullChunkedResumesOnlyMissingBytes(t *testing.T) {
	const cutAt = 3<<20 + 300_000 // the chunk at 3 MiB breaks after 300 kB
	for _, conc := range []int{1, 3} {
		t.Run(fmt.Sprintf("concurrency %d", conc), func(t *testing.T) {
			ctx := context.Background()
			large := testFile{"m/big.safetensors", body("chunky", 6<<20+123), 0o644}
			var once sync.Once
			s := &rangeServer{blob: "sha256:" + hexOf(large.data), cut: func(rng string) int64 {
				cut := int64(-1)
				if rangeStart(rng) == 3<<20 {
					once.Do(func() { cut = 300_000 })
				}
				return cut
			}}
			res := publishBehind(t, s, []testFile{large, {"m/config.json", []byte("{}"), 0o644}})
			dir := t.TempDir()
			opts := PullOptions{ChunkSize: 1 << 20, Concurrency: conc, Attempts: 1}
			_, err := Pull(ctx, res.Manifest, res.Source, dir, opts)
			if err == nil || !strings.Contains(err.Error(), "kept in .kiln-partial to resume") {
				t.Fatalf("cut transfer: err = %v", err)
			}
			for _, f := range []string{"big.safetensors", "config.json"} {
				if _, err := os.Stat(filepath.Join(dir, ModelDir, f)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s was put in place before the volume was verified", f)
				}
			}
			part := filepath.Join(dir, PartialDir, hexOf(large.data)+".part")
			done, ok := blob.ReadRanges(part, int64(len(large.data)))
			if !ok {
				t.Fatalf("no usable %s after the cut", blob.RangesPath(part))
			}
			if conc == 1 && fmt.Sprint([][2]int64(done)) != fmt.Sprintf("[[0 %d]]", cutAt) {
				t.Errorf("recorded %v, want [[0 %d]]: chunks in order, the cut one up to the cut", done, cutAt)
			}
			if done.PrefixEnd(3<<20) != cutAt {
				t.Errorf("recorded %v: the bytes before the cut are not all there", done)
			}
			// What the record claims is on disk really is.
			b, err := os.ReadFile(part)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range done {
				if string(b[r[0]:r[1]]) != string(large.data[r[0]:r[1]]) {
					t.Errorf("bytes %v recorded as done differ from the blob", r)
				}
			}

			s.reset()
			r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{ChunkSize: 1 << 20, Concurrency: conc})
			if err != nil {
				t.Fatal(err)
			}
			ranges, sent := s.reset()
			if want := int64(len(large.data)) - done.Bytes(); sent != want {
				t.Errorf("the rerun moved %d bytes of the blob, want only the missing %d (ranges %q)", sent, want, ranges)
			}
			for _, rng := range ranges {
				if a := rangeStart(rng); done.PrefixEnd(a) != a {
					t.Errorf("the rerun asked again for %s, which was already on disk", rng)
				}
			}
			if r.Resumed != done.Bytes() {
				t.Errorf("resumed %d, want %d", r.Resumed, done.Bytes())
			}
			if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
				t.Errorf("resumed volume: %+v %v", rep, err)
			}
		})
	}
}

func TestPullChunkedRejectsCorruptChunk(t *testing.T) {
	ctx := context.Background()
	large := testFile{"m/big.safetensors", body("bad chunk", 5<<20), 0o644}
	s := &rangeServer{blob: "sha256:" + hexOf(large.data), corrupt: func(rng string) bool { return rangeStart(rng) == 2<<20 }}
	res := publishBehind(t, s, []testFile{large, {"m/config.json", []byte("{}"), 0o644}})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "old.txt"), []byte("keep"), 0o644)
	before := tree(t, dir)
	_, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{ChunkSize: 1 << 20, Concurrency: 2})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "sha256:"+hexOf(large.data)) {
		t.Fatalf("err = %v, want a corrupt-blob error naming it", err)
	}
	ranges, _ := s.reset()
	if len(ranges) != 5*3 {
		t.Errorf("requests %q, want the 5 chunks once per attempt (3): a source that keeps sending bad bytes fails after the bounded retries", ranges)
	}
	part := filepath.Join(dir, PartialDir, hexOf(large.data)+".part")
	for _, f := range []string{part, blob.RangesPath(part)} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s kept after a corrupt blob", filepath.Base(f))
		}
	}
	after := tree(t, dir)
	for k := range after {
		if strings.HasPrefix(k, PartialDir) {
			delete(after, k) // the small blob's verified partial may remain
		}
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("volume changed: before %v after %v", before, after)
	}
}

// A rerun whose resumed bytes were lost (a crash between the write and the
// writeback) fails its digest; the blob is then fetched once from scratch.
func TestPullChunkedRefetchesLostBytes(t *testing.T) {
	ctx := context.Background()
	large := testFile{"m/big.safetensors", body("lost write", 6<<20), 0o644}
	var once sync.Once
	s := &rangeServer{blob: "sha256:" + hexOf(large.data), cut: func(rng string) int64 {
		cut := int64(-1)
		if rangeStart(rng) == 4<<20 {
			once.Do(func() { cut = 1000 })
		}
		return cut
	}}
	res := publishBehind(t, s, []testFile{large})
	dir := t.TempDir()
	opts := PullOptions{ChunkSize: 1 << 20, Concurrency: 1, Attempts: 1}
	if _, err := Pull(ctx, res.Manifest, res.Source, dir, opts); err == nil {
		t.Fatal("cut transfer did not fail")
	}
	part := filepath.Join(dir, PartialDir, hexOf(large.data)+".part")
	done, _ := blob.ReadRanges(part, int64(len(large.data)))
	f, err := os.OpenFile(part, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, 4096), 1<<20) // recorded as done, but zeros
	f.Close()
	s.reset()
	if _, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{ChunkSize: 1 << 20, Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	_, sent := s.reset()
	if want := int64(len(large.data))*2 - done.Bytes(); sent != want {
		t.Errorf("moved %d bytes, want the missing ones then the whole blob again: %d", sent, want)
	}
	if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
		t.Errorf("volume: %+v %v", rep, err)
	}
}

// A partial left by a one-connection download (no record) is resumed by a
// chunked pull from its size.
func TestPullChunkedResumesSequentialPartial(t *testing.T) {
	ctx := context.Background()
	large := testFile{"m/big.safetensors", body("switch", 4<<20+7), 0o644}
	s := &rangeServer{blob: "sha256:" + hexOf(large.data)}
	res := publishBehind(t, s, []testFile{large})
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, PartialDir), 0o755)
	const have = 1<<20 + 5
	os.WriteFile(filepath.Join(dir, PartialDir, hexOf(large.data)+".part"), large.data[:have], 0o600)
	r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, sent := s.reset(); sent != int64(len(large.data))-have || r.Resumed != have {
		t.Errorf("moved %d bytes, resumed %d; want %d and %d", sent, r.Resumed, int64(len(large.data))-have, have)
	}
	if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
		t.Errorf("volume: %+v %v", rep, err)
	}
}

func TestPullBoundsConnections(t *testing.T) {
	for _, conc := range []int{1, 2} {
		t.Run(fmt.Sprintf("concurrency %d", conc), func(t *testing.T) {
			ctx := context.Background()
			files := []testFile{
				{"m/a.safetensors", body("ca", 4<<20), 0o644},
				{"m/b.safetensors", body("cb", 4<<20), 0o644},
				{"m/c.safetensors", body("cc", 1<<20+1), 0o644}, // one connection
			}
			s := &rangeServer{delay: 20 * time.Millisecond}
			res := publishBehind(t, s, files)
			if _, err := Pull(ctx, res.Manifest, res.Source, t.TempDir(), PullOptions{Jobs: 3, ChunkSize: 1 << 20, Concurrency: conc}); err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.maxInflight > conc {
				t.Errorf("%d requests in flight at once, --concurrency %d", s.maxInflight, conc)
			}
			if conc > 1 && s.maxInflight < 2 {
				t.Errorf("never more than one request in flight: chunks are not fetched in parallel")
			}
		})
	}
}

// LimitRate is a floor on the time a pull takes (never a ceiling: a busy
// machine may be slower).
func TestPullLimitRate(t *testing.T) {
	ctx := context.Background()
	res, _ := publishLayout(t, []testFile{{"m/a.safetensors", body("slow", 3<<20), 0o644}, {"m/b.json", []byte("{}"), 0o644}})
	start := time.Now()
	if _, err := Pull(ctx, res.Manifest, res.Source, t.TempDir(), PullOptions{ChunkSize: 512 << 10, LimitRate: 6 << 20}); err != nil {
		t.Fatal(err)
	}
	// 3 MiB at 6 MiB/s is 500ms, less the 100ms burst an idle limiter grants.
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("3 MiB at --limit-rate 6MiB took %v", d)
	}
}
