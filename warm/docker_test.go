package warm

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	stage := filepath.Join(t.TempDir(), "stage")
	tgt, err := OpenTarget(ctx, TargetSpec{Kind: "docker", Addr: dk.Socket}, TargetOptions{DockerStage: stage})
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
	rep, err := Warm(ctx, set, tgt, Options{DryRun: true})
	if err != nil || rep.Ready || rep.blob(f.big).State != StateMissing {
		t.Fatalf("dry run: ready=%v big=%+v err=%v", rep.Ready, rep.blob(f.big), err)
	}
	// Small chunks: the staged 6 MiB layer arrives as parallel Range
	// requests, as on the oci: and containerd targets.
	rep, err = Warm(ctx, set, tgt, Options{ChunkSize: 512 << 10, ChunkThreshold: 1 << 20, ChunksPerBlob: 3})
	if err != nil || !rep.Ready {
		t.Fatalf("warm: ready=%v err=%v", rep.Ready, err)
	}
	if b := rep.blob(f.big); b.State != StateFetched || b.BytesFetched != f.size || f.reg.Served(f.big) != f.size {
		t.Errorf("big layer: %+v, served %d, size %d", b, f.reg.Served(f.big), f.size)
	}
	if got := f.reg.Gets(f.big); got < 6 {
		t.Errorf("big layer took %d GETs; want parallel Range chunks (>= 6)", got)
	}
	if _, err := os.Stat(stage); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stage %s after a successful load: %v, want it removed", stage, err)
	}
	im, ok := dk.Inspect(t, f.ref)
	cfgDigest := set.Images[0].Config.Digest.String()
	if !ok || im.ID != cfgDigest || len(im.RootFS.Layers) != 2 {
		t.Fatalf("docker image inspect %s: %+v (found %v), want ID %s with 2 layers", f.ref, im, ok, cfgDigest)
	}

	// Rerun: ready, nothing fetched.
	f.reg.ResetCounts()
	rep, err = Warm(ctx, resolveD(f.ref), tgt, Options{})
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
	rep, err = Warm(ctx, resolveD(refB), tgt, Options{})
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
	rep, err = Warm(ctx, resolveD(refC), tgt, Options{Attempts: 2})
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
	if rep, err := Warm(ctx, resolveD(refC), tgt, Options{}); err != nil || !rep.Ready {
		t.Fatalf("healed registry: %v", err)
	}

	// zstd only: refused, naming Docker 23.0.
	refZ := f.reg.Host + "/kiln-warm/zonly:v1"
	testimage.Push(t, refZ, testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("z", []byte("zstd"))}, "zstd")))
	_, err = Resolve(ctx, []string{refZ}, ResolveOptions{Platform: amd64, Blobs: src, NoZstd: noZstd})
	if err == nil || !strings.Contains(err.Error(), "23.0") || !strings.Contains(err.Error(), "zstd") {
		t.Fatalf("zstd-only image: err = %v", err)
	}
}

// A warm killed mid-layer resumes from the staged bytes: the rerun reads
// only the rest of the layer from the registry and the image loads. A
// staged blob that no longer verifies (tampered on disk, same size) is
// refused while it streams, removed, staged again and loaded; --keep-stage
// keeps the staged layers.
func TestWarmDockerResumesFromStage(t *testing.T) {
	dk := testdaemon.StartDockerd(t)
	f := pushFixture(t, false)
	src := fastSource()
	stage := filepath.Join(t.TempDir(), "stage")
	tgt, err := OpenTarget(context.Background(), TargetSpec{Kind: "docker", Addr: dk.Socket}, TargetOptions{DockerStage: stage})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	noZstd := tgt.(ZstdChecker).NoZstd(context.Background())
	set := resolve(t, context.Background(), src, ResolveOptions{NoZstd: noZstd}, f.ref)

	// Preflight: a stage on a 3 MiB tmpfs cannot hold the 6 MiB layer;
	// refused before a byte is read, naming the stage.
	if os.Geteuid() == 0 {
		small := t.TempDir()
		if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=3m"); err != nil {
			t.Fatalf("tmpfs: %v", err)
		}
		defer syscall.Unmount(small, syscall.MNT_DETACH)
		tiny, err := OpenTarget(context.Background(), TargetSpec{Kind: "docker", Addr: dk.Socket}, TargetOptions{DockerStage: filepath.Join(small, "stage")})
		if err != nil {
			t.Fatal(err)
		}
		f.reg.ResetCounts()
		rep, err := Warm(context.Background(), set, tiny, Options{})
		tiny.Close()
		if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "to stage") || !strings.Contains(err.Error(), small) || rep.Ready {
			t.Fatalf("preflight on a 3 MiB stage: %v", err)
		}
		if f.reg.TotalServed() != 0 {
			t.Fatalf("preflight read %d bytes", f.reg.TotalServed())
		}
	}

	// Kill the run (cancel) after 2.5 MiB of the large layer arrived.
	ctx, cancel := context.WithCancel(context.Background())
	f.reg.StallAfter(f.big, 5<<19, func() { time.Sleep(300 * time.Millisecond); cancel() })
	rep, err := Warm(ctx, set, tgt, Options{ChunkThreshold: 1 << 40})
	if err == nil || rep.Ready {
		t.Fatalf("interrupted run: ready=%v err=%v", rep.Ready, err)
	}
	if _, ok := dk.Inspect(t, f.ref); ok {
		t.Fatal("the interrupted image reached the engine")
	}
	partial := filepath.Join(stage, ".kiln-partial", strings.TrimPrefix(f.big, "sha256:"))
	if fi, err := os.Stat(partial); err != nil || fi.Size() == 0 || fi.Size() >= f.size {
		t.Fatalf("staged partial %s: %v, want some of the %d bytes", partial, err, f.size)
	}

	f.reg.ResetCounts()
	rep, err = Warm(context.Background(), set, tgt, Options{ChunkThreshold: 1 << 40})
	if err != nil || !rep.Ready {
		t.Fatalf("resumed run: ready=%v err=%v", rep.Ready, err)
	}
	br := rep.blob(f.big)
	if br.Resumed <= 0 || br.State != StateFetched {
		t.Fatalf("large layer did not resume: %+v", br)
	}
	if got := f.reg.Served(f.big); got != f.size-br.Resumed {
		t.Errorf("resumed run read %d bytes of the large layer; want size %d - resumed %d", got, f.size, br.Resumed)
	}
	if br.BytesFetched != f.size-br.Resumed {
		t.Errorf("report bytes_fetched %d, want %d", br.BytesFetched, f.size-br.Resumed)
	}
	im, ok := dk.Inspect(t, f.ref)
	if !ok || im.ID != set.Images[0].Config.Digest.String() || len(im.RootFS.Layers) != 2 {
		t.Fatalf("docker image inspect %s: %+v (found %v)", f.ref, im, ok)
	}
	if _, err := os.Stat(stage); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stage after the load: %v, want it removed", err)
	}

	// A tampered staged blob of the right size: refused (the stage
	// verifies what it holds), staged again from the registry, loaded.
	// --keep-stage keeps it.
	kept, err := OpenTarget(context.Background(), TargetSpec{Kind: "docker", Addr: dk.Socket}, TargetOptions{DockerStage: stage, KeepStage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	l := randomLayer(t, "t.bin", 1<<20, 11)
	refT := f.reg.Host + "/kiln-warm/app:tampered"
	testimage.Push(t, refT, testimage.Image(t, testimage.Config{}, l))
	ld := digestOf(t, l)
	size, _ := l.Size()
	staged := filepath.Join(stage, "blobs", "sha256", strings.TrimPrefix(ld, "sha256:"))
	if err := os.MkdirAll(filepath.Dir(staged), 0o755); err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, size)
	rand.New(rand.NewSource(5)).Read(junk)
	if err := os.WriteFile(staged, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	f.reg.ResetCounts()
	var logs []string
	rep, err = Warm(context.Background(), resolve(t, context.Background(), src, ResolveOptions{NoZstd: noZstd}, refT), kept,
		Options{Log: func(format string, a ...any) { logs = append(logs, format) }})

	if err != nil || !rep.Ready {
		t.Fatalf("tampered stage: ready=%v err=%v", rep.Ready, err)
	}
	if f.reg.Served(ld) != size {
		t.Errorf("tampered stage: served %d of %d bytes (%d log lines); want it staged again", f.reg.Served(ld), size, len(logs))
	}
	if _, ok := dk.Inspect(t, refT); !ok {
		t.Error("tampered stage: image not loaded")
	}
	if fi, err := os.Stat(staged); err != nil || fi.Size() != size {
		t.Errorf("--keep-stage: staged layer %v", err)
	}
}
