package warm

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
)

// A real dockerd (Debian's docker.io 20.10): warm, no-op rerun, layers
// shared with an image the engine has are not fetched, a corrupted layer
// loads nothing, and zstd is refused on an engine before 23.0.
func TestWarmDockerEngine(t *testing.T) {
	dk := testdaemon.StartDockerd(t)
	ctx := context.Background()
	f := pushFixture(t, false)
	src := fastSource()
	tgt, err := OpenTarget(ctx, TargetSpec{Kind: "docker", Addr: dk.Socket}, TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	noZstd := tgt.(ZstdChecker).NoZstd(ctx)
	if !strings.Contains(noZstd, "23.0") {
		t.Fatalf("engine %s: NoZstd = %q, want a refusal naming Docker 23.0", tgt.(*Docker).Version(), noZstd)
	}
	resolveD := func(ref string) *Set {
		return resolve(t, ctx, src, ResolveOptions{NoZstd: noZstd}, ref)
	}

	set := resolveD(f.ref)
	rep, err := Warm(ctx, set, tgt, src, Options{DryRun: true})
	if err != nil || rep.Ready || rep.blob(f.big).State != StateMissing {
		t.Fatalf("dry run: ready=%v big=%+v err=%v", rep.Ready, rep.blob(f.big), err)
	}
	rep, err = Warm(ctx, set, tgt, src, Options{})
	if err != nil || !rep.Ready {
		t.Fatalf("warm: ready=%v err=%v", rep.Ready, err)
	}
	if b := rep.blob(f.big); b.State != StateFetched || b.BytesFetched != f.size || f.reg.Served(f.big) != f.size {
		t.Errorf("big layer: %+v, served %d, size %d", b, f.reg.Served(f.big), f.size)
	}
	im, ok := dk.Inspect(t, f.ref)
	cfgDigest := set.Images[0].Config.Digest.String()
	if !ok || im.ID != cfgDigest || len(im.RootFS.Layers) != 2 {
		t.Fatalf("docker image inspect %s: %+v (found %v), want ID %s with 2 layers", f.ref, im, ok, cfgDigest)
	}

	// Rerun: ready, nothing fetched.
	f.reg.ResetCounts()
	rep, err = Warm(ctx, resolveD(f.ref), tgt, src, Options{})
	if err != nil || !rep.Ready || rep.FetchedBytes != 0 || rep.MissingBytes != 0 {
		t.Fatalf("rerun: ready=%v fetched=%d missing=%d err=%v", rep.Ready, rep.FetchedBytes, rep.MissingBytes, err)
	}
	for _, b := range rep.Blobs {
		if b.State != StatePresent {
			t.Errorf("rerun: blob %s (%s) %s", b.Digest, b.Kind, b.State)
		}
	}
	if f.reg.Served(f.big)+f.reg.Served(f.small) != 0 {
		t.Errorf("rerun read layer bytes from the registry")
	}

	// An image on top of the same layers: only its new layer travels.
	extra := randomLayer(t, "extra.bin", 512<<10, 7)
	lsA, _ := f.img.Layers()
	imgB := testimage.Image(t, testimage.Config{}, lsA[0], lsA[1], extra)
	refB := f.reg.Host + "/kiln-warm/app:v2"
	testimage.Push(t, refB, imgB)
	f.reg.ResetCounts()
	rep, err = Warm(ctx, resolveD(refB), tgt, src, Options{})
	if err != nil || !rep.Ready {
		t.Fatalf("warm B: %v", err)
	}
	if f.reg.Served(f.big) != 0 || f.reg.Served(f.small) != 0 || f.reg.Served(digestOf(t, extra)) == 0 {
		t.Errorf("warm B served big=%d small=%d extra=%d; want only the new layer", f.reg.Served(f.big), f.reg.Served(f.small), f.reg.Served(digestOf(t, extra)))
	}
	if b := rep.blob(f.big); b.State != StatePresent {
		t.Errorf("shared layer in B's report: %+v", b)
	}

	// A registry serving a corrupted layer: the load fails before its
	// manifest.json, the engine gains no image.
	bad := randomLayer(t, "bad.bin", 256<<10, 9)
	refC := f.reg.Host + "/kiln-warm/app:v3"
	testimage.Push(t, refC, testimage.Image(t, testimage.Config{}, bad))
	before := len(dk.Images(t))
	f.reg.Corrupt(digestOf(t, bad), true)
	rep, err = Warm(ctx, resolveD(refC), tgt, src, Options{Attempts: 2})
	if err == nil || rep.Ready || !strings.Contains(err.Error(), "nothing was loaded") || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("corrupt layer: ready=%v err=%v", rep.Ready, err)
	}
	if b := rep.blob(digestOf(t, bad)); b.State != StateFailed || f.reg.Gets(digestOf(t, bad)) < 2 {
		t.Errorf("corrupt layer: %+v after %d GETs, want failed after 2 tries", b, f.reg.Gets(digestOf(t, bad)))
	}
	if _, ok := dk.Inspect(t, refC); ok || len(dk.Images(t)) != before {
		t.Errorf("a corrupted image reached the engine (found %v, images %d → %d)", ok, before, len(dk.Images(t)))
	}
	f.reg.Corrupt(digestOf(t, bad), false)
	if rep, err := Warm(ctx, resolveD(refC), tgt, src, Options{}); err != nil || !rep.Ready {
		t.Fatalf("healed registry: %v", err)
	}

	// zstd only: refused, naming Docker 23.0.
	refZ := f.reg.Host + "/kiln-warm/zonly:v1"
	testimage.Push(t, refZ, testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("z", []byte("zstd"))}, "zstd")))
	_, err = Resolve(ctx, []string{refZ}, ResolveOptions{Platform: amd64, Source: src, NoZstd: noZstd})
	if err == nil || !strings.Contains(err.Error(), "23.0") || !strings.Contains(err.Error(), "zstd") {
		t.Fatalf("zstd-only image: err = %v", err)
	}
}
