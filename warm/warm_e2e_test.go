package warm_test

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

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/containerd"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
	"github.com/kiln-build/kiln/warm/targets"
)

func TestWarmOCILayout(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
	// index + warmtest.AMD64 manifest + config + 2 layers; nothing of arm64.
	kinds := map[warm.Kind]int{}
	for _, b := range set.Blobs {
		kinds[b.Kind]++
	}
	if kinds[warm.KindIndex] != 1 || kinds[warm.KindManifest] != 1 || kinds[warm.KindConfig] != 1 || kinds[warm.KindLayer] != 2 {
		t.Fatalf("warm set kinds = %v, want 1 index, 1 manifest, 1 config, 2 layers", kinds)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	tgt, err := ocilayout.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Dry run on an empty target: everything missing, not ready.
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{DryRun: true})
	if err != nil || rep.Ready || rep.MissingBytes != set.Bytes() {
		t.Fatalf("dry run: ready=%v missing=%d (want %d) err=%v", rep.Ready, rep.MissingBytes, set.Bytes(), err)
	}
	// Small chunks so the 6 MiB layer goes through parallel Range requests.
	rep, err = warm.Warm(ctx, set, tgt, warm.Options{ChunkSize: 512 << 10, ChunkThreshold: 1 << 20, ChunksPerBlob: 3})
	if err != nil || !rep.Ready {
		t.Fatalf("warm: ready=%v err=%v", rep.Ready, err)
	}
	if got := f.Reg.Gets(f.Big); got < 6 {
		t.Errorf("large blob took %d GETs; want parallel Range chunks (>= 6)", got)
	}
	if f.Reg.Served(f.Big) != f.Size {
		t.Errorf("large blob: served %d bytes, size %d", f.Reg.Served(f.Big), f.Size)
	}
	// What we wrote is a valid layout that go-containerregistry reads back
	// with every digest intact.
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	ii, _ := p.ImageIndex()
	im, _ := ii.IndexManifest()
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[ocispec.AnnotationRefName] != f.Ref {
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
		vr, _ := registry.NewVerifyReader(rc, d, -1)
		if err := vr.Drain(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	// Second run: everything present, no blob bytes read.
	f.Reg.ResetCounts()
	rep, err = warm.Warm(ctx, set, tgt, warm.Options{})
	if err != nil || !rep.Ready || rep.FetchedBytes != 0 || f.Reg.TotalServed() != 0 {
		t.Fatalf("rerun: ready=%v fetched=%d served=%d err=%v", rep.Ready, rep.FetchedBytes, f.Reg.TotalServed(), err)
	}
	for _, b := range rep.Blobs {
		if b.State != warm.StatePresent {
			t.Errorf("rerun: %s is %s", b.Digest, b.State)
		}
	}
}

func TestWarmResumesMidBlob(t *testing.T) {
	for _, kind := range []string{"oci", "containerd", "containerd-grpc"} {
		t.Run(kind, func(t *testing.T) {
			f := warmtest.PushFixture(t, false)
			tgt := openTestTarget(t, kind)
			src := warmtest.FastSource()
			set := warmtest.Resolve(t, context.Background(), src, warm.ResolveOptions{}, f.Ref)
			// Kill the run (cancel) after 2.5 MiB of the large blob arrived.
			ctx, cancel := context.WithCancel(context.Background())
			f.Reg.StallAfter(f.Big, 5<<19, func() { time.Sleep(300 * time.Millisecond); cancel() })
			rep, err := warm.Warm(ctx, set, tgt, warm.Options{ChunkThreshold: 1 << 40})
			if err == nil || rep.Ready {
				t.Fatalf("interrupted run: ready=%v err=%v", rep.Ready, err)
			}
			if ok, _ := tgt.(warm.Store).Has(context.Background(), warmtest.Find(set, f.Big)); ok {
				t.Fatal("interrupted blob is committed")
			}
			f.Reg.ResetCounts()
			// The bars of the resumed run (as warm.Run gives them): one
			// counter for the warm, one per layer.
			var done, layers atomic.Int64
			var mu sync.Mutex
			per := map[string]*atomic.Int64{}
			rep, err = warm.Warm(context.Background(), set, tgt, warm.Options{ChunkThreshold: 1 << 40, Progress: &done,
				BlobProgress: func(b *warm.Blob) *atomic.Int64 {
					mu.Lock()
					defer mu.Unlock()
					per[b.Digest.String()] = new(atomic.Int64)
					return per[b.Digest.String()]
				}})
			if err != nil || !rep.Ready {
				t.Fatalf("resumed run: ready=%v err=%v", rep.Ready, err)
			}
			br := warmtest.BlobOf(rep, f.Big)
			if br.Resumed <= 0 {
				t.Fatalf("large blob did not resume: %+v", br)
			}
			// Issue 36: the bars end full, counting what the target held
			// and what the interrupted run left, and the report says how
			// much was resumed.
			for _, b := range set.Blobs {
				if b.Kind == warm.KindLayer {
					layers.Add(b.Size)
				}
			}
			counted := done.Load()
			for _, c := range per {
				counted += c.Load()
			}
			if counted != layers.Load() {
				t.Errorf("the bars counted %d bytes of %d (resumed %d)", counted, layers.Load(), br.Resumed)
			}
			if c := per[f.Big]; c == nil || c.Load() != f.Size {
				t.Errorf("the large layer's bar ends at %v of %d", c, f.Size)
			}
			if rep.ResumedBytes != br.Resumed {
				t.Errorf("report resumed_bytes %d, want the large blob's %d", rep.ResumedBytes, br.Resumed)
			}
			if got := f.Reg.Served(f.Big); got != f.Size-br.Resumed || got >= f.Size {
				t.Errorf("resumed run fetched %d bytes of the large blob; want size %d - resumed %d", got, f.Size, br.Resumed)
			}
			if br.BytesFetched != f.Size-br.Resumed {
				t.Errorf("report bytes_fetched %d, want %d", br.BytesFetched, f.Size-br.Resumed)
			}
		})
	}
}

func TestWarmCorruptBlob(t *testing.T) {
	for _, kind := range []string{"oci", "containerd", "containerd-grpc"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			f := warmtest.PushFixture(t, false)
			tgt := openTestTarget(t, kind)
			src := warmtest.FastSource()
			set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
			f.Reg.Corrupt(f.Big, true)
			rep, err := warm.Warm(ctx, set, tgt, warm.Options{Attempts: 3})
			if err == nil || rep.Ready {
				t.Fatalf("corrupt blob: ready=%v err=%v", rep.Ready, err)
			}
			br := warmtest.BlobOf(rep, f.Big)
			if br.State != warm.StateFailed || !strings.Contains(br.Error, "digest") {
				t.Fatalf("corrupt blob report: %+v", br)
			}
			if n := f.Reg.Gets(f.Big); n != 3 {
				t.Errorf("corrupt blob fetched %d times, want 3 tries", n)
			}
			if ok, _ := tgt.(warm.Store).Has(ctx, warmtest.Find(set, f.Big)); ok {
				t.Fatal("a corrupted blob was committed")
			}
			// The registry heals: the next run starts the blob over and succeeds.
			f.Reg.Corrupt(f.Big, false)
			f.Reg.ResetCounts()
			rep, err = warm.Warm(ctx, set, tgt, warm.Options{})
			if err != nil || !rep.Ready {
				t.Fatalf("after repair: ready=%v err=%v", rep.Ready, err)
			}
			// Whole: nothing of the corrupted tries is resumed from. (A
			// try that a loaded machine made too slow may be fetched again,
			// so the bytes served are at least the size, not exactly it.)
			if br := warmtest.BlobOf(rep, f.Big); br.Resumed != 0 {
				t.Errorf("after a digest mismatch the blob must be fetched whole: %d bytes resumed from the corrupted tries", br.Resumed)
			}
			if got := f.Reg.Served(f.Big); got < f.Size {
				t.Errorf("after a digest mismatch the blob must be fetched whole: got %d of %d", got, f.Size)
			}
		})
	}
}

func TestWarmRetries5xxAnd429(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
	f.Reg.Answer(f.Big, warmtest.Fault{Code: 503}, warmtest.Fault{Code: 502}, warmtest.Fault{Code: 429, RetryAfter: "1"})
	f.Reg.Answer(f.Small, warmtest.Fault{Code: 500})
	tgt, _ := ocilayout.New(t.TempDir())
	start := time.Now()
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{ChunkThreshold: 1 << 40, Concurrency: 1})
	if err != nil || !rep.Ready {
		t.Fatalf("ready=%v err=%v", rep.Ready, err)
	}
	if got := f.Reg.Gets(f.Big); got != 4 {
		t.Errorf("large blob: %d GETs, want 3 failures + 1 success", got)
	}
	if got := f.Reg.Gets(f.Small); got != 2 {
		t.Errorf("small blob: %d GETs, want 2", got)
	}
	// Backoff alone is 10+20+40ms here: only Retry-After makes it a second.
	if el := time.Since(start); el < time.Second {
		t.Errorf("Retry-After: 1 not honoured: done in %v", el)
	}
	// A 404 is not retried: it fails at once.
	f2 := warmtest.PushFixture(t, false)
	set2 := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f2.Ref)
	f2.Reg.Answer(f2.Big, warmtest.Fault{Code: 404})
	tgt2, _ := ocilayout.New(t.TempDir())
	if _, err := warm.Warm(ctx, set2, tgt2, warm.Options{ChunkThreshold: 1 << 40, Attempts: 1}); err == nil {
		t.Fatal("404 did not fail")
	}
	if got := f2.Reg.Gets(f2.Big); got != 1 {
		t.Errorf("404 retried: %d GETs", got)
	}
}

func TestWarmFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=3m"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	tgt, err := ocilayout.New(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	// The preflight refuses before a byte is fetched.
	f.Reg.ResetCounts()
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{})
	if !errors.Is(err, preflight.ErrNoSpace) || !strings.Contains(err.Error(), "free in") {
		t.Fatalf("preflight: %v", err)
	}
	if rep.FetchedBytes != 0 || f.Reg.TotalServed() != 0 {
		t.Fatalf("preflight fetched %d bytes", f.Reg.TotalServed())
	}
	// Without it, the write hits ENOSPC: a clear error, and nothing
	// half-written is committed.
	rep, err = warm.Warm(ctx, set, tgt, warm.Options{SkipSpaceCheck: true, ChunkThreshold: 1 << 40})
	if !errors.Is(err, preflight.ErrNoSpace) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("write on a full disk: %v", err)
	}
	if ok, _ := tgt.Has(ctx, warmtest.Find(set, f.Big)); ok {
		t.Fatal("large blob committed on a full disk")
	}
	if _, err := os.Stat(filepath.Join(dir, "oci", "blobs", "sha256", strings.TrimPrefix(f.Big, "sha256:"))); !os.IsNotExist(err) {
		t.Fatalf("blob file exists: %v", err)
	}
	_ = rep
}

func TestWarmContainerdRunWithoutPull(t *testing.T) {
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("no ctr")
	}
	ctx := context.Background()
	f := warmtest.PushFixture(t, true)
	ci := testdaemon.StartContainerd(t)
	tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, targets.Options{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	src := warmtest.FastSource()
	set := warmtest.Resolve(t, ctx, src, warm.ResolveOptions{}, f.Ref)
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{Unpack: true})
	if err != nil || !rep.Ready || !rep.Unpacked {
		t.Fatalf("ready=%v unpacked=%v err=%v", rep.Ready, rep.Unpacked, err)
	}
	sn := tgt.(*containerd.Containerd).Snapshotter()
	// containerd's own tools see a complete image.
	out, err := ci.Ctr(t, "images", "check")
	if err != nil || !strings.Contains(out, f.Ref) || !strings.Contains(out, "complete") {
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
	f.Reg.ResetCounts()
	out, err = ci.Ctr(t, append(ci.PullArgs(), "--plain-http", "--snapshotter", sn, f.Ref)...)
	if err != nil {
		t.Fatalf("ctr images pull: %v\n%s", err, out)
	}
	if n := f.Reg.TotalServed(); n != 0 {
		t.Errorf("ctr pull after the warm fetched %d blob bytes (big %d, small %d):\n%s", n, f.Reg.Served(f.Big), f.Reg.Served(f.Small), out)
	}
	// The registry goes away; the container still starts.
	f.Reg.Stop()
	if out, err := ci.Ctr(t, "run", "--rm", "--snapshotter", sn, f.Ref, "kiln-warm-test", "/bin/true"); err != nil {
		t.Fatalf("ctr run with the registry down: %v\n%s", err, out)
	}
}

// openTestTarget opens an empty target of kind.
func openTestTarget(t *testing.T, kind string) warm.Target {
	t.Helper()
	switch kind {
	case "oci":
		tgt, err := ocilayout.New(filepath.Join(t.TempDir(), "oci"))
		if err != nil {
			t.Fatal(err)
		}
		return tgt
	case "containerd", "containerd-grpc":
		// "containerd": the direct ingest path (this test's daemon is
		// local), required so a silent fallback cannot pass for it.
		ci := testdaemon.StartContainerd(t)
		o := targets.Options{Ingest: containerd.IngestDirect}
		if kind == "containerd-grpc" {
			o.Ingest = containerd.IngestGRPC
		}
		tgt, err := targets.Open(context.Background(), warm.TargetSpec{Kind: "containerd", Addr: ci.Socket}, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tgt.Close() })
		if root, why := tgt.(*containerd.Containerd).Direct(); (root != "") != (kind == "containerd") {
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
	f := warmtest.PushFixture(t, false)
	set := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, f.Ref)
	var mu sync.Mutex
	per := map[string]*atomic.Int64{}
	var total atomic.Int64
	rep, err := warm.Warm(ctx, set, openTestTarget(t, "oci"), warm.Options{Progress: &total, BlobProgress: func(b *warm.Blob) *atomic.Int64 {
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
		if b.Kind != warm.KindLayer {
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
