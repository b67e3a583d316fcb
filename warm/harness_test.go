package warm

import (
	"context"
	"io"
	"log"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/internal/testimage"
)

// testRegistry is a real (in-process) registry behind a wrapper that counts
// the blob bytes it serves and injects faults: status answers, corrupted
// bodies, a stall mid-body (to kill a run mid-blob).
type testRegistry struct {
	t    testing.TB
	srv  *httptest.Server
	Host string

	mu      sync.Mutex
	served  map[string]int64 // digest → blob body bytes sent
	gets    map[string]int   // digest → blob GETs
	answers map[string][]fault
	corrupt map[string]bool
	stall   map[string]stallAt
	slow    map[string]time.Duration
}

type fault struct {
	code       int
	retryAfter string
}

type stallAt struct {
	after int64
	hook  func()
}

var blobPath = regexp.MustCompile(`/v2/.+/blobs/(sha256:[0-9a-f]{64})$`)

func newTestRegistry(t testing.TB) *testRegistry {
	r := &testRegistry{t: t, served: map[string]int64{}, gets: map[string]int{}, answers: map[string][]fault{}, corrupt: map[string]bool{}, stall: map[string]stallAt{}, slow: map[string]time.Duration{}}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		m := blobPath.FindStringSubmatch(req.URL.Path)
		if m == nil || req.Method != http.MethodGet {
			h.ServeHTTP(w, req)
			return
		}
		dg := m[1]
		r.mu.Lock()
		r.gets[dg]++
		var f *fault
		if q := r.answers[dg]; len(q) > 0 {
			f = &q[0]
			r.answers[dg] = q[1:]
		}
		corrupt := r.corrupt[dg]
		slow := r.slow[dg]
		st, stall := r.stall[dg]
		if stall {
			delete(r.stall, dg)
		}
		r.mu.Unlock()
		if f != nil {
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
			http.Error(w, "injected", f.code)
			return
		}
		cw := &countingWriter{ResponseWriter: w, r: r, dg: dg, corrupt: corrupt, slow: slow}
		if stall {
			cw.stallAfter, cw.hook = st.after, st.hook
			cw.ctx = req.Context()
		}
		h.ServeHTTP(cw, req)
	}))
	t.Cleanup(r.srv.Close)
	u, _ := url.Parse(r.srv.URL)
	r.Host = u.Host
	return r
}

// Stop closes the registry: later requests fail to connect.
func (r *testRegistry) Stop() { r.srv.Close() }

func (r *testRegistry) Served(dg string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.served[dg]
}

func (r *testRegistry) Gets(dg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[dg]
}

func (r *testRegistry) TotalServed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, v := range r.served {
		n += v
	}
	return n
}

func (r *testRegistry) ResetCounts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.served = map[string]int64{}
	r.gets = map[string]int{}
}

func (r *testRegistry) Answer(dg string, fs ...fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[dg] = append(r.answers[dg], fs...)
}

func (r *testRegistry) Corrupt(dg string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.corrupt[dg] = on
}

// Slow makes every body write of dg's GETs wait d first (0: full speed), so
// a blob takes a while to arrive.
func (r *testRegistry) Slow(dg string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slow[dg] = d
}

// StallAfter makes the next GET of dg send n bytes, call hook, and hang
// until the client goes away.
func (r *testRegistry) StallAfter(dg string, n int64, hook func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stall[dg] = stallAt{after: n, hook: hook}
}

type countingWriter struct {
	http.ResponseWriter
	r          *testRegistry
	dg         string
	corrupt    bool
	n          int64
	stallAfter int64
	hook       func()
	ctx        context.Context
	slow       time.Duration
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.hook != nil && c.n+int64(len(p)) >= c.stallAfter {
		p = p[:c.stallAfter-c.n]
		n, _ := c.ResponseWriter.Write(p)
		c.add(n)
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		c.hook()
		c.hook = nil
		<-c.ctx.Done()
		return n, io.ErrClosedPipe
	}
	if c.slow > 0 && len(p) > 32<<10 {
		// The registry hands the whole blob to one Write: pace it in
		// 32 KiB pieces.
		var n int
		for len(p) > 0 {
			k, err := c.Write(p[:min(len(p), 32<<10)])
			n += k
			if err != nil {
				return n, err
			}
			p = p[k:]
		}
		return n, nil
	}
	if c.slow > 0 {
		time.Sleep(c.slow)
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			defer f.Flush()
		}
	}
	if c.corrupt && len(p) > 0 {
		q := append([]byte(nil), p...)
		q[len(q)/2] ^= 0xff
		p = q
	}
	n, err := c.ResponseWriter.Write(p)
	c.add(n)
	return n, err
}

func (c *countingWriter) add(n int) {
	c.n += int64(n)
	c.r.mu.Lock()
	c.r.served[c.dg] += int64(n)
	c.r.mu.Unlock()
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// randomLayer is an incompressible gzip layer of about n bytes.
func randomLayer(t testing.TB, name string, n int, seed int64) v1.Layer {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return testimage.Layer(t, []testimage.Entry{testimage.File(name, b)}, "gzip")
}

func digestOf(t testing.TB, l interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func (s *Set) find(dg string) ocispec.Descriptor {
	for _, b := range s.Blobs {
		if b.Digest.String() == dg {
			return b.Descriptor
		}
	}
	return ocispec.Descriptor{}
}

func (r *Report) blob(dg string) BlobReport {
	for _, b := range r.Blobs {
		if b.Digest == dg {
			return b
		}
	}
	return BlobReport{}
}

func withCmd(t testing.TB, img v1.Image, cmd ...string) v1.Image {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Cmd = cmd
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
