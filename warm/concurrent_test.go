package warm

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
)

// twoImages pushes two images that share the fixture's slow large layer,
// so two warms of them overlap on it.
func twoImages(t *testing.T) (*fixture, []string) {
	t.Helper()
	f := pushFixture(t, false)
	ls, _ := f.img.Layers()
	other := testimage.Image(t, testimage.Config{}, append(ls[1:], testimage.Layer(t, []testimage.Entry{testimage.File("etc/other", []byte("2"))}, "gzip"))...)
	ref2 := f.reg.Host + "/kiln-warm/other:v1"
	testimage.Push(t, ref2, other)
	f.reg.Slow(f.big, 2*time.Millisecond)
	return f, []string{f.ref, ref2}
}

// warmBoth runs one warm per ref at the same time, each on a target of its
// own that open returns (as two kiln processes would).
func warmBoth(t *testing.T, refs []string, open func() Target) []*Report {
	t.Helper()
	ctx := context.Background()
	src := fastSource()
	reps := make([]*Report, len(refs))
	errs := make([]error, len(refs))
	sets := make([]*Set, len(refs))
	for i, ref := range refs {
		sets[i] = resolve(t, ctx, src, ResolveOptions{}, ref)
	}
	var wg sync.WaitGroup
	for i := range refs {
		tgt := open()
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = Warm(ctx, sets[i], tgt, Options{ChunkThreshold: 1 << 40, Attempts: 1})
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
func TestWarmConcurrentOCILayout(t *testing.T) {
	f, refs := twoImages(t)
	dir := filepath.Join(t.TempDir(), "oci")
	warmBoth(t, refs, func() Target {
		tgt, err := NewOCILayout(dir)
		if err != nil {
			t.Fatal(err)
		}
		return tgt
	})
	l, _ := NewOCILayout(dir)
	names, err := l.ExistingImages()
	if err != nil || len(names) != 2 {
		t.Fatalf("index.json names %v (%v), want both images", names, err)
	}
	if got := f.reg.Served(f.big); got != f.size {
		t.Errorf("shared layer: served %d bytes, want it fetched once (%d)", got, f.size)
	}
}

// TestWarmConcurrentContainerdLeases: two runs on one containerd take
// leases of their own, so the first to finish does not delete the one
// still protecting the other (F8).
func TestWarmConcurrentContainerdLeases(t *testing.T) {
	ci := testdaemon.StartContainerd(t)
	ctx := context.Background()
	ingest := IngestGRPC
	open := func() Target {
		tgt, err := OpenTarget(ctx, TargetSpec{Kind: "containerd", Addr: ci.Socket}, TargetOptions{Namespace: "default", Ingest: ingest})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tgt.Close() })
		return tgt
	}
	// The same set twice: the same image warmed by two runs at once.
	f, _ := twoImages(t)
	set := resolve(t, ctx, fastSource(), ResolveOptions{}, f.ref)
	a, b := open().(*Containerd), open().(*Containerd)
	if err := a.Lease(ctx, set); err != nil {
		t.Fatal(err)
	}
	if err := b.Lease(ctx, set); err != nil {
		t.Fatal(err)
	}
	if a.leaseID == b.leaseID {
		t.Fatalf("two runs share lease %s", a.leaseID)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := ci.Ctr(t, "leases", "ls")
	if err != nil || !strings.Contains(out, b.leaseID) {
		t.Fatalf("the first run's release took the second's lease: %v\n%s", err, out)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
	// Both write paths: a second writer of a blob waits for the first.
	for _, ingest = range []string{IngestGRPC, IngestDirect} {
		warmBoth(t, []string{f.ref, f.ref}, open)
		if out, err := ci.Ctr(t, "leases", "ls"); err != nil || strings.Contains(out, "kiln-warm") {
			t.Fatalf("%s: lease left behind: %v %s", ingest, err, out)
		}
		if out, err := ci.Ctr(t, "images", "rm", "--sync", f.ref); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
}
