package warm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
)

var amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

type fixture struct {
	reg   *testRegistry
	ref   string
	big   string // digest of the large layer
	size  int64  // its size
	small string
	img   v1.Image
}

// pushFixture pushes a two-platform index whose amd64 image has a small
// runnable-or-not layer and an incompressible ~6 MiB one.
func pushFixture(t *testing.T, runnable bool) *fixture {
	t.Helper()
	reg := newTestRegistry(t)
	var small v1.Layer
	if runnable {
		small = testimage.RunnableLayer(t)
	} else {
		small = testimage.Layer(t, []testimage.Entry{testimage.File("etc/hello", []byte("hi"))}, "gzip")
	}
	big := randomLayer(t, "weights.bin", 6<<20, 1)
	img := testimage.Image(t, testimage.Config{}, small, big)
	if runnable {
		img = withCmd(t, img, "/bin/true")
	}
	arm := testimage.ImageFor(t, "arm64", testimage.Config{}, randomLayer(t, "arm.bin", 1<<20, 2))
	ref := reg.Host + "/kiln-warm/app:v1"
	testimage.PushIndex(t, ref, testimage.Index(t, img, arm))
	sz, _ := big.Size()
	return &fixture{reg: reg, ref: ref, big: digestOf(t, big), size: sz, small: digestOf(t, small), img: img}
}

func resolve(t *testing.T, ctx context.Context, src *blob.Registry, o ResolveOptions, refs ...string) *Set {
	t.Helper()
	o.Platform = amd64
	o.Blobs = src
	s, err := Resolve(ctx, refs, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fastSource() *blob.Registry {
	return blob.NewRegistry(nil, layers.WithRetries(5, 10*time.Millisecond), layers.WithMaxWait(2*time.Second))
}

func TestWarmOCILayout(t *testing.T) {
	ctx := context.Background()
	f := pushFixture(t, false)
	src := fastSource()
	set := resolve(t, ctx, src, ResolveOptions{}, f.ref)
	// index + amd64 manifest + config + 2 layers; nothing of arm64.
	kinds := map[Kind]int{}
	for _, b := range set.Blobs {
		kinds[b.Kind]++
	}
	if kinds[KindIndex] != 1 || kinds[KindManifest] != 1 || kinds[KindConfig] != 1 || kinds[KindLayer] != 2 {
		t.Fatalf("warm set kinds = %v, want 1 index, 1 manifest, 1 config, 2 layers", kinds)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	tgt, err := NewOCILayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Dry run on an empty target: everything missing, not ready.
	rep, err := Warm(ctx, set, tgt, Options{DryRun: true})
	if err != nil || rep.Ready || rep.MissingBytes != set.Bytes() {
		t.Fatalf("dry run: ready=%v missing=%d (want %d) err=%v", rep.Ready, rep.MissingBytes, set.Bytes(), err)
	}
	// Small chunks so the 6 MiB layer goes through parallel Range requests.
	rep, err = Warm(ctx, set, tgt, Options{ChunkSize: 512 << 10, ChunkThreshold: 1 << 20, ChunksPerBlob: 3})
	if err != nil || !rep.Ready {
		t.Fatalf("warm: ready=%v err=%v", rep.Ready, err)
	}
	if got := f.reg.Gets(f.big); got < 6 {
		t.Errorf("large blob took %d GETs; want parallel Range chunks (>= 6)", got)
	}
	if f.reg.Served(f.big) != f.size {
		t.Errorf("large blob: served %d bytes, size %d", f.reg.Served(f.big), f.size)
	}
	// What we wrote is a valid layout that go-containerregistry reads back
	// with every digest intact.
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	ii, _ := p.ImageIndex()
	im, _ := ii.IndexManifest()
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[annRefName] != f.ref {
		t.Fatalf("index.json = %+v", im.Manifests)
	}
	img, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	for _, l := range ls {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		d, _ := l.Digest()
		vr, _ := layers.NewVerifyReader(rc, d, -1)
		if err := vr.Drain(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	// Second run: everything present, no blob bytes read.
	f.reg.ResetCounts()
	rep, err = Warm(ctx, set, tgt, Options{})
	if err != nil || !rep.Ready || rep.FetchedBytes != 0 || f.reg.TotalServed() != 0 {
		t.Fatalf("rerun: ready=%v fetched=%d served=%d err=%v", rep.Ready, rep.FetchedBytes, f.reg.TotalServed(), err)
	}
	for _, b := range rep.Blobs {
		if b.State != StatePresent {
			t.Errorf("rerun: %s is %s", b.Digest, b.State)
		}
	}
}

func TestWarmResumesMidBlob(t *testing.T) {
	for _, kind := range []string{"oci", "containerd", "containerd-grpc"} {
		t.Run(kind, func(t *testing.T) {
			f := pushFixture(t, false)
			tgt := openTestTarget(t, kind)
			src := fastSource()
			set := resolve(t, context.Background(), src, ResolveOptions{}, f.ref)
			// Kill the run (cancel) after 2.5 MiB of the large blob arrived.
			ctx, cancel := context.WithCancel(context.Background())
			f.reg.StallAfter(f.big, 5<<19, func() { time.Sleep(300 * time.Millisecond); cancel() })
			rep, err := Warm(ctx, set, tgt, Options{ChunkThreshold: 1 << 40})
			if err == nil || rep.Ready {
				t.Fatalf("interrupted run: ready=%v err=%v", rep.Ready, err)
			}
			if ok, _ := tgt.(Store).Has(context.Background(), set.find(f.big)); ok {
				t.Fatal("interrupted blob is committed")
			}
			f.reg.ResetCounts()
			rep, err = Warm(context.Background(), set, tgt, Options{ChunkThreshold: 1 << 40})
			if err != nil || !rep.Ready {
				t.Fatalf("resumed run: ready=%v err=%v", rep.Ready, err)
			}
			br := rep.blob(f.big)
			if br.Resumed <= 0 {
				t.Fatalf("large blob did not resume: %+v", br)
			}
			if got := f.reg.Served(f.big); got != f.size-br.Resumed || got >= f.size {
				t.Errorf("resumed run fetched %d bytes of the large blob; want size %d - resumed %d", got, f.size, br.Resumed)
			}
			if br.BytesFetched != f.size-br.Resumed {
				t.Errorf("report bytes_fetched %d, want %d", br.BytesFetched, f.size-br.Resumed)
			}
		})
	}
}

func TestWarmCorruptBlob(t *testing.T) {
	for _, kind := range []string{"oci", "containerd", "containerd-grpc"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			f := pushFixture(t, false)
			tgt := openTestTarget(t, kind)
			src := fastSource()
			set := resolve(t, ctx, src, ResolveOptions{}, f.ref)
			f.reg.Corrupt(f.big, true)
			rep, err := Warm(ctx, set, tgt, Options{Attempts: 3})
			if err == nil || rep.Ready {
				t.Fatalf("corrupt blob: ready=%v err=%v", rep.Ready, err)
			}
			br := rep.blob(f.big)
			if br.State != StateFailed || !strings.Contains(br.Error, "digest") {
				t.Fatalf("corrupt blob report: %+v", br)
			}
			if n := f.reg.Gets(f.big); n != 3 {
				t.Errorf("corrupt blob fetched %d times, want 3 tries", n)
			}
			if ok, _ := tgt.(Store).Has(ctx, set.find(f.big)); ok {
				t.Fatal("a corrupted blob was committed")
			}
			// The registry heals: the next run starts the blob over and succeeds.
			f.reg.Corrupt(f.big, false)
			f.reg.ResetCounts()
			rep, err = Warm(ctx, set, tgt, Options{})
			if err != nil || !rep.Ready {
				t.Fatalf("after repair: ready=%v err=%v", rep.Ready, err)
			}
			if got := f.reg.Served(f.big); got != f.size {
				t.Errorf("after a digest mismatch the blob must be fetched whole: got %d of %d", got, f.size)
			}
		})
	}
}

func TestWarmRetries5xxAnd429(t *testing.T) {
	ctx := context.Background()
	f := pushFixture(t, false)
	src := fastSource()
	set := resolve(t, ctx, src, ResolveOptions{}, f.ref)
	f.reg.Answer(f.big, fault{code: 503}, fault{code: 502}, fault{code: 429, retryAfter: "1"})
	f.reg.Answer(f.small, fault{code: 500})
	tgt, _ := NewOCILayout(t.TempDir())
	start := time.Now()
	rep, err := Warm(ctx, set, tgt, Options{ChunkThreshold: 1 << 40, Concurrency: 1})
	if err != nil || !rep.Ready {
		t.Fatalf("ready=%v err=%v", rep.Ready, err)
	}
	if got := f.reg.Gets(f.big); got != 4 {
		t.Errorf("large blob: %d GETs, want 3 failures + 1 success", got)
	}
	if got := f.reg.Gets(f.small); got != 2 {
		t.Errorf("small blob: %d GETs, want 2", got)
	}
	// Backoff alone is 10+20+40ms here: only Retry-After makes it a second.
	if el := time.Since(start); el < time.Second {
		t.Errorf("Retry-After: 1 not honoured: done in %v", el)
	}
	// A 404 is not retried: it fails at once.
	f2 := pushFixture(t, false)
	set2 := resolve(t, ctx, src, ResolveOptions{}, f2.ref)
	f2.reg.Answer(f2.big, fault{code: 404})
	tgt2, _ := NewOCILayout(t.TempDir())
	if _, err := Warm(ctx, set2, tgt2, Options{ChunkThreshold: 1 << 40, Attempts: 1}); err == nil {
		t.Fatal("404 did not fail")
	}
	if got := f2.reg.Gets(f2.big); got != 1 {
		t.Errorf("404 retried: %d GETs", got)
	}
}

func TestWarmFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	ctx := context.Background()
	f := pushFixture(t, false)
	src := fastSource()
	set := resolve(t, ctx, src, ResolveOptions{}, f.ref)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=3m"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	tgt, err := NewOCILayout(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	// The preflight refuses before a byte is fetched.
	f.reg.ResetCounts()
	rep, err := Warm(ctx, set, tgt, Options{})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "free in") {
		t.Fatalf("preflight: %v", err)
	}
	if rep.FetchedBytes != 0 || f.reg.TotalServed() != 0 {
		t.Fatalf("preflight fetched %d bytes", f.reg.TotalServed())
	}
	// Without it, the write hits ENOSPC: a clear error, and nothing
	// half-written is committed.
	rep, err = Warm(ctx, set, tgt, Options{SkipSpaceCheck: true, ChunkThreshold: 1 << 40})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("write on a full disk: %v", err)
	}
	if ok, _ := tgt.Has(ctx, set.find(f.big)); ok {
		t.Fatal("large blob committed on a full disk")
	}
	if _, err := os.Stat(filepath.Join(dir, "oci", "blobs", "sha256", strings.TrimPrefix(f.big, "sha256:"))); !os.IsNotExist(err) {
		t.Fatalf("blob file exists: %v", err)
	}
	_ = rep
}

func TestWarmContainerdRunWithoutPull(t *testing.T) {
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("no ctr")
	}
	ctx := context.Background()
	f := pushFixture(t, true)
	ci := testdaemon.StartContainerd(t)
	tgt, err := OpenTarget(ctx, TargetSpec{Kind: "containerd", Addr: ci.Socket}, TargetOptions{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	src := fastSource()
	set := resolve(t, ctx, src, ResolveOptions{}, f.ref)
	rep, err := Warm(ctx, set, tgt, Options{Unpack: true})
	if err != nil || !rep.Ready || !rep.Unpacked {
		t.Fatalf("ready=%v unpacked=%v err=%v", rep.Ready, rep.Unpacked, err)
	}
	sn := tgt.(*Containerd).Snapshotter()
	// containerd's own tools see a complete image.
	out, err := ci.Ctr(t, "images", "check")
	if err != nil || !strings.Contains(out, f.ref) || !strings.Contains(out, "complete") {
		t.Fatalf("ctr images check: %v\n%s", err, out)
	}
	// Survives garbage collection: the lease is gone, the record holds it.
	if out, err := ci.Ctr(t, "leases", "ls"); err != nil || strings.Contains(out, "kiln-warm") {
		t.Fatalf("lease left behind: %v %s", err, out)
	}
	// A synchronous garbage collection (deleting a lease with --sync).
	if out, err := ci.Ctr(t, "leases", "create", "--id", "gc-trigger"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if out, err := ci.Ctr(t, "leases", "delete", "--sync", "gc-trigger"); err != nil {
		t.Fatalf("gc: %v %s", err, out)
	}
	if out, err := ci.Ctr(t, "images", "check"); err != nil || !strings.Contains(out, "complete") {
		t.Fatalf("after GC: %v\n%s", err, out)
	}
	// containerd's pull finds everything: no blob bytes served.
	f.reg.ResetCounts()
	out, err = ci.Ctr(t, append(ci.PullArgs(), "--plain-http", "--snapshotter", sn, f.ref)...)
	if err != nil {
		t.Fatalf("ctr images pull: %v\n%s", err, out)
	}
	if n := f.reg.TotalServed(); n != 0 {
		t.Errorf("ctr pull after the warm fetched %d blob bytes (big %d, small %d):\n%s", n, f.reg.Served(f.big), f.reg.Served(f.small), out)
	}
	// The registry goes away; the container still starts.
	f.reg.Stop()
	if out, err := ci.Ctr(t, "run", "--rm", "--snapshotter", sn, f.ref, "kiln-warm-test", "/bin/true"); err != nil {
		t.Fatalf("ctr run with the registry down: %v\n%s", err, out)
	}
}

// openTestTarget opens an empty target of kind.
func openTestTarget(t *testing.T, kind string) Target {
	t.Helper()
	switch kind {
	case "oci":
		tgt, err := NewOCILayout(filepath.Join(t.TempDir(), "oci"))
		if err != nil {
			t.Fatal(err)
		}
		return tgt
	case "containerd", "containerd-grpc":
		// "containerd": the direct ingest path (this test's daemon is
		// local), required so a silent fallback cannot pass for it.
		ci := testdaemon.StartContainerd(t)
		o := TargetOptions{Ingest: IngestDirect}
		if kind == "containerd-grpc" {
			o.Ingest = IngestGRPC
		}
		tgt, err := OpenTarget(context.Background(), TargetSpec{Kind: "containerd", Addr: ci.Socket}, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tgt.Close() })
		if root, why := tgt.(*Containerd).Direct(); (root != "") != (kind == "containerd") {
			t.Fatalf("%s: direct root %q (%s)", kind, root, why)
		}
		return tgt
	}
	t.Fatalf("unknown target kind %s", kind)
	return nil
}

// Issue 25 item 7: a bar per layer. BlobProgress gives each layer its
// own counter as its fetch starts; each ends at its layer's size, and the
// layers' bytes are not counted twice in Progress.
func TestWarmBlobProgressPerLayer(t *testing.T) {
	ctx := context.Background()
	f := pushFixture(t, false)
	set := resolve(t, ctx, fastSource(), ResolveOptions{}, f.ref)
	var mu sync.Mutex
	per := map[string]*atomic.Int64{}
	var total atomic.Int64
	rep, err := Warm(ctx, set, openTestTarget(t, "oci"), Options{Progress: &total, BlobProgress: func(b *Blob) *atomic.Int64 {
		c := new(atomic.Int64)
		mu.Lock()
		defer mu.Unlock()
		if per[b.Digest.String()] != nil {
			t.Errorf("layer %s given two counters", b.Digest)
		}
		per[b.Digest.String()] = c
		return c
	}})
	if err != nil || !rep.Ready {
		t.Fatalf("ready=%v err=%v", rep.Ready, err)
	}
	layers := 0
	for _, b := range set.Blobs {
		if b.Kind != KindLayer {
			continue
		}
		layers++
		if c := per[b.Digest.String()]; c == nil || c.Load() != b.Size {
			t.Errorf("layer %s (%d bytes): counter %v", b.Digest, b.Size, c)
		}
	}
	if len(per) != layers || total.Load() != 0 {
		t.Errorf("%d counters for %d layers; Progress counted %d bytes beside them", len(per), layers, total.Load())
	}
}
