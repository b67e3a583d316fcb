// Package warmtest is the test support of warm and its adapters: an
// in-process registry that counts the blob bytes it serves and injects
// faults, and the two-platform image Fixture the engine's and the
// adapters' tests warm.
package warmtest

import (
	"context"
	"fmt"
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

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers/blob"
	kregistry "github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
)

// Registry is a real (in-process) registry behind a wrapper that counts
// the blob bytes it serves and injects faults: status answers, corrupted
// bodies, a stall mid-body (to kill a run mid-blob).
type Registry struct {
	t    testing.TB
	srv  *httptest.Server
	Host string

	mu      sync.Mutex
	served  map[string]int64 // digest → blob body bytes sent
	gets    map[string]int   // digest → blob GETs
	answers map[string][]Fault
	corrupt map[string]bool
	stall   map[string]stallAt
	slow    map[string]time.Duration
}

// Fault is an injected answer to a blob GET.
type Fault struct {
	Code       int
	RetryAfter string
}

type stallAt struct {
	after int64
	hook  func()
}

var blobPath = regexp.MustCompile(`/v2/.+/blobs/(sha256:[0-9a-f]{64})$`)

func NewRegistry(t testing.TB) *Registry {
	r := &Registry{t: t, served: map[string]int64{}, gets: map[string]int{}, answers: map[string][]Fault{}, corrupt: map[string]bool{}, stall: map[string]stallAt{}, slow: map[string]time.Duration{}}
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
		var f *Fault
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
			if f.RetryAfter != "" {
				w.Header().Set("Retry-After", f.RetryAfter)
			}
			http.Error(w, "injected", f.Code)
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
func (r *Registry) Stop() { r.srv.Close() }

func (r *Registry) Served(dg string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.served[dg]
}

func (r *Registry) Gets(dg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[dg]
}

func (r *Registry) TotalServed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, v := range r.served {
		n += v
	}
	return n
}

func (r *Registry) ResetCounts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.served = map[string]int64{}
	r.gets = map[string]int{}
}

func (r *Registry) Answer(dg string, fs ...Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[dg] = append(r.answers[dg], fs...)
}

func (r *Registry) Corrupt(dg string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.corrupt[dg] = on
}

// Slow makes every body write of dg's GETs wait d first (0: full speed), so
// a blob takes a while to arrive.
func (r *Registry) Slow(dg string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slow[dg] = d
}

// StallAfter makes the next GET of dg send n bytes, call hook, and hang
// until the client goes away.
func (r *Registry) StallAfter(dg string, n int64, hook func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stall[dg] = stallAt{after: n, hook: hook}
}

type countingWriter struct {
	http.ResponseWriter
	r          *Registry
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

// RandomLayer is an incompressible gzip layer of about n bytes.
func RandomLayer(t testing.TB, name string, n int, seed int64) v1.Layer {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return testimage.Layer(t, []testimage.Entry{testimage.File(name, b)}, "gzip")
}

func DigestOf(t testing.TB, l interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// Find is the descriptor of the blob dg in s.
func Find(s *warm.Set, dg string) ocispec.Descriptor {
	for _, b := range s.Blobs {
		if b.Digest.String() == dg {
			return b.Descriptor
		}
	}
	return ocispec.Descriptor{}
}

// BlobOf is the report of the blob dg.
func BlobOf(r *warm.Report, dg string) warm.BlobReport {
	for _, b := range r.Blobs {
		if b.Digest == dg {
			return b
		}
	}
	return warm.BlobReport{}
}

func WithCmd(t testing.TB, img v1.Image, cmd ...string) v1.Image {
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

var AMD64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// Fixture is a pushed two-platform index (PushFixture).
type Fixture struct {
	Reg   *Registry
	Ref   string
	Big   string // digest of the large layer
	Size  int64  // its size
	Small string
	Img   v1.Image
}

// PushFixture pushes a two-platform index whose AMD64 image has a small
// runnable-or-not layer and an incompressible ~6 MiB one.
func PushFixture(t testing.TB, runnable bool) *Fixture {
	t.Helper()
	reg := NewRegistry(t)
	var small v1.Layer
	if runnable {
		small = testimage.RunnableLayer(t)
	} else {
		small = testimage.Layer(t, []testimage.Entry{testimage.File("etc/hello", []byte("hi"))}, "gzip")
	}
	big := RandomLayer(t, "weights.bin", 6<<20, 1)
	img := testimage.Image(t, testimage.Config{}, small, big)
	if runnable {
		img = WithCmd(t, img, "/bin/true")
	}
	arm := testimage.ImageFor(t, "arm64", testimage.Config{}, RandomLayer(t, "arm.bin", 1<<20, 2))
	ref := reg.Host + "/kiln-warm/app:v1"
	testimage.PushIndex(t, ref, testimage.Index(t, img, arm))
	sz, _ := big.Size()
	return &Fixture{Reg: reg, Ref: ref, Big: DigestOf(t, big), Size: sz, Small: DigestOf(t, small), Img: img}
}

func Resolve(t testing.TB, ctx context.Context, src *kregistry.Pool, o warm.ResolveOptions, refs ...string) *warm.Set {
	t.Helper()
	o.Platform = AMD64
	o.Blobs = src
	s, err := warm.Resolve(ctx, testkit.Refs(t, refs...), o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FastSource is a blob source with short retries, over opts (e.g. a
// registry's mirrors).
func FastSource(opts ...kregistry.Option) *kregistry.Pool {
	return kregistry.NewPool(opts, kregistry.WithRetries(5, 10*time.Millisecond), kregistry.WithMaxWait(2*time.Second))
}

func TwoImages(t testing.TB) (*Fixture, []string) {
	t.Helper()
	f := PushFixture(t, false)
	ls, _ := f.Img.Layers()
	other := testimage.Image(t, testimage.Config{}, append(ls[1:], testimage.Layer(t, []testimage.Entry{testimage.File("etc/other", []byte("2"))}, "gzip"))...)
	ref2 := f.Reg.Host + "/kiln-warm/other:v1"
	testimage.Push(t, ref2, other)
	f.Reg.Slow(f.Big, 2*time.Millisecond)
	return f, []string{f.Ref, ref2}
}

// WarmBoth runs one warm per ref at the same time, each on a target of its
// own that open returns (as two kiln processes would).
func WarmBoth(t testing.TB, refs []string, open func() warm.Target) []*warm.Report {
	t.Helper()
	ctx := context.Background()
	src := FastSource()
	reps := make([]*warm.Report, len(refs))
	errs := make([]error, len(refs))
	sets := make([]*warm.Set, len(refs))
	for i, ref := range refs {
		sets[i] = Resolve(t, ctx, src, warm.ResolveOptions{}, ref)
	}
	var wg sync.WaitGroup
	for i := range refs {
		tgt := open()
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = warm.Warm(ctx, sets[i], tgt, warm.Options{ChunkThreshold: 1 << 40, Attempts: 1})
		}()
	}
	wg.Wait()
	for i := range refs {
		if errs[i] != nil || !reps[i].Ready {
			t.Errorf("warm %d (%s): ready=%v err=%v", i, refs[i], reps[i] != nil && reps[i].Ready, errs[i])
		}
	}
	return reps
}

// TestWarmConcurrentOCILayout: two runs on one oci:DIR at once both
// succeed, and index.json keeps both entries (F8).

// BlobStore is a warm Store as the blob.Writer conformance suite
// (blobtest) sees it: a writer per digest and size, and the committed
// bytes read back the store's own way (ReadBlob).
type BlobStore struct {
	warm.Store
	ReadBlob func(ctx context.Context, d ocispec.Descriptor) ([]byte, error)
}

func descriptor(dg v1.Hash, size int64) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(dg.String()), Size: size}
}

// Writer opens the store's writer of blob dg.
func (s BlobStore) Writer(ctx context.Context, dg v1.Hash, size int64) (blob.Writer, error) {
	return s.Store.Writer(ctx, descriptor(dg, size))
}

// Read reads back the committed blob dg.
func (s BlobStore) Read(ctx context.Context, dg v1.Hash, size int64) ([]byte, error) {
	d := descriptor(dg, size)
	ok, err := s.Has(ctx, d)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("blob %s: not committed", dg)
	}
	return s.ReadBlob(ctx, d)
}
