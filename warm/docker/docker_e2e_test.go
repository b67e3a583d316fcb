package docker_test

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

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/docker"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/targets"
)

// A real dockerd (Debian's docker.io 20.10): warm, no-op rerun, layers
// shared with an image the engine has are not fetched, a corrupted layer
// loads nothing, and zstd is refused on an engine before 23.0.
func TestWarmDockerEngine(t *testing.T) {
	dk := testdaemon.StartDockerd(t)
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	stage := filepath.Join(t.TempDir(), "stage")
	tgt, err := targets.Open(ctx, warm.TargetSpec{Kind: "docker", Addr: dk.Socket}, targets.Options{DockerStage: stage})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	noZstd := tgt.(warm.ZstdChecker).NoZstd(ctx)
	if !strings.Contains(noZstd, "23.0") {
		t.Fatalf("engine %s: NoZstd = %q, want a refusal naming Docker 23.0", tgt.(*docker.Docker).Version(), noZstd)
	}
	resolveD := func(ref string) *warm.Set {
		return warmtest.Resolve(t, ctx, src, warm.ResolveOptions{NoZstd: noZstd}, ref)
	}

	set := resolveD(f.Ref)
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{DryRun: true})
	if err != nil || rep.Ready || warmtest.BlobOf(rep, f.Big).State != warm.StateMissing {
		t.Fatalf("dry run: ready=%v big=%+v err=%v", rep.Ready, warmtest.BlobOf(rep, f.Big), err)
	}
	// Small chunks: the staged 6 MiB layer arrives as parallel Range
	// requests, as on the oci: and containerd targets.
	rep, err = warm.Warm(ctx, set, tgt, warm.Options{ChunkSize: 512 << 10, ChunkThreshold: 1 << 20, ChunksPerBlob: 3})
	if err != nil || !rep.Ready {
		t.Fatalf("warm: ready=%v err=%v", rep.Ready, err)
	}
	if b := warmtest.BlobOf(rep, f.Big); b.State != warm.StateFetched || b.BytesFetched != f.Size || f.Reg.Served(f.Big) != f.Size {
		t.Errorf("big layer: %+v, served %d, size %d", b, f.Reg.Served(f.Big), f.Size)
	}
	if got := f.Reg.Gets(f.Big); got < 6 {
		t.Errorf("big layer took %d GETs; want parallel Range chunks (>= 6)", got)
	}
	if _, err := os.Stat(stage); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stage %s after a successful load: %v, want it removed", stage, err)
	}
	im, ok := dk.Inspect(t, f.Ref)
	cfgDigest := set.Images[0].Config.Digest.String()
	if !ok || im.ID != cfgDigest || len(im.RootFS.Layers) != 2 {
		t.Fatalf("docker image inspect %s: %+v (found %v), want ID %s with 2 layers", f.Ref, im, ok, cfgDigest)
	}

	// Rerun: ready, nothing fetched.
	f.Reg.ResetCounts()
	rep, err = warm.Warm(ctx, resolveD(f.Ref), tgt, warm.Options{})
	if err != nil || !rep.Ready || rep.FetchedBytes != 0 || rep.MissingBytes != 0 {
		t.Fatalf("rerun: ready=%v fetched=%d missing=%d err=%v", rep.Ready, rep.FetchedBytes, rep.MissingBytes, err)
	}
	for _, b := range rep.Blobs {
		if b.State != warm.StatePresent {
			t.Errorf("rerun: blob %s (%s) %s", b.Digest, b.Kind, b.State)
		}
	}
	if f.Reg.Served(f.Big)+f.Reg.Served(f.Small) != 0 {
		t.Errorf("rerun read layer bytes from the registry")
	}

	// An image on top of the same layers: only its new layer travels.
	extra := warmtest.RandomLayer(t, "extra.bin", 512<<10, 7)
	lsA, _ := f.Img.Layers()
	imgB := testimage.Image(t, testimage.Config{}, lsA[0], lsA[1], extra)
	refB := f.Reg.Host + "/kiln-warm/app:v2"
	testimage.Push(t, refB, imgB)
	f.Reg.ResetCounts()
	rep, err = warm.Warm(ctx, resolveD(refB), tgt, warm.Options{})
	if err != nil || !rep.Ready {
		t.Fatalf("warm B: %v", err)
	}
	if f.Reg.Served(f.Big) != 0 || f.Reg.Served(f.Small) != 0 || f.Reg.Served(warmtest.DigestOf(t, extra)) == 0 {
		t.Errorf("warm B served big=%d small=%d extra=%d; want only the new layer", f.Reg.Served(f.Big), f.Reg.Served(f.Small), f.Reg.Served(warmtest.DigestOf(t, extra)))
	}
	if b := warmtest.BlobOf(rep, f.Big); b.State != warm.StatePresent {
		t.Errorf("shared layer in B's report: %+v", b)
	}

	// A registry serving a corrupted layer: the load fails before its
	// manifest.json, the engine gains no image.
	bad := warmtest.RandomLayer(t, "bad.bin", 256<<10, 9)
	refC := f.Reg.Host + "/kiln-warm/app:v3"
	testimage.Push(t, refC, testimage.Image(t, testimage.Config{}, bad))
	before := len(dk.Images(t))
	f.Reg.Corrupt(warmtest.DigestOf(t, bad), true)
	rep, err = warm.Warm(ctx, resolveD(refC), tgt, warm.Options{Attempts: 2})
	if err == nil || rep.Ready || !strings.Contains(err.Error(), "nothing was loaded") || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("corrupt layer: ready=%v err=%v", rep.Ready, err)
	}
	if b := warmtest.BlobOf(rep, warmtest.DigestOf(t, bad)); b.State != warm.StateFailed || f.Reg.Gets(warmtest.DigestOf(t, bad)) < 2 {
		t.Errorf("corrupt layer: %+v after %d GETs, want failed after 2 tries", b, f.Reg.Gets(warmtest.DigestOf(t, bad)))
	}
	if _, ok := dk.Inspect(t, refC); ok || len(dk.Images(t)) != before {
		t.Errorf("a corrupted image reached the engine (found %v, images %d → %d)", ok, before, len(dk.Images(t)))
	}
	f.Reg.Corrupt(warmtest.DigestOf(t, bad), false)
	if rep, err := warm.Warm(ctx, resolveD(refC), tgt, warm.Options{}); err != nil || !rep.Ready {
		t.Fatalf("healed registry: %v", err)
	}

	// zstd only: refused, naming Docker 23.0.
	refZ := f.Reg.Host + "/kiln-warm/zonly:v1"
	testimage.Push(t, refZ, testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.File("z", []byte("zstd"))}, "zstd")))
	_, err = warm.Resolve(ctx, testkit.Refs(t, refZ), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: src, NoZstd: noZstd})
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
	f := warmtest.PushFixture(t, false)
	src := warmtest.FastSource()
	stage := filepath.Join(t.TempDir(), "stage")
	tgt, err := targets.Open(context.Background(), warm.TargetSpec{Kind: "docker", Addr: dk.Socket}, targets.Options{DockerStage: stage})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	noZstd := tgt.(warm.ZstdChecker).NoZstd(context.Background())
	set := warmtest.Resolve(t, context.Background(), src, warm.ResolveOptions{NoZstd: noZstd}, f.Ref)

	// Preflight: a stage on a 3 MiB tmpfs cannot hold the 6 MiB layer;
	// refused before a byte is read, naming the stage.
	if os.Geteuid() == 0 {
		small := t.TempDir()
		if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=3m"); err != nil {
			t.Fatalf("tmpfs: %v", err)
		}
		defer syscall.Unmount(small, syscall.MNT_DETACH)
		tiny, err := targets.Open(context.Background(), warm.TargetSpec{Kind: "docker", Addr: dk.Socket}, targets.Options{DockerStage: filepath.Join(small, "stage")})
		if err != nil {
			t.Fatal(err)
		}
		f.Reg.ResetCounts()
		rep, err := warm.Warm(context.Background(), set, tiny, warm.Options{})
		tiny.Close()
		if !errors.Is(err, preflight.ErrNoSpace) || !strings.Contains(err.Error(), "to stage") || !strings.Contains(err.Error(), small) || rep.Ready {
			t.Fatalf("preflight on a 3 MiB stage: %v", err)
		}
		if f.Reg.TotalServed() != 0 {
			t.Fatalf("preflight read %d bytes", f.Reg.TotalServed())
		}
	}

	// Kill the run (cancel) after 2.5 MiB of the large layer arrived.
	ctx, cancel := context.WithCancel(context.Background())
	f.Reg.StallAfter(f.Big, 5<<19, func() { time.Sleep(300 * time.Millisecond); cancel() })
	rep, err := warm.Warm(ctx, set, tgt, warm.Options{ChunkThreshold: 1 << 40})
	if err == nil || rep.Ready {
		t.Fatalf("interrupted run: ready=%v err=%v", rep.Ready, err)
	}
	if _, ok := dk.Inspect(t, f.Ref); ok {
		t.Fatal("the interrupted image reached the engine")
	}
	partial := filepath.Join(stage, ".kiln-partial", strings.TrimPrefix(f.Big, "sha256:"))
	if fi, err := os.Stat(partial); err != nil || fi.Size() == 0 || fi.Size() >= f.Size {
		t.Fatalf("staged partial %s: %v, want some of the %d bytes", partial, err, f.Size)
	}

	f.Reg.ResetCounts()
	rep, err = warm.Warm(context.Background(), set, tgt, warm.Options{ChunkThreshold: 1 << 40})
	if err != nil || !rep.Ready {
		t.Fatalf("resumed run: ready=%v err=%v", rep.Ready, err)
	}
	br := warmtest.BlobOf(rep, f.Big)
	if br.Resumed <= 0 || br.State != warm.StateFetched {
		t.Fatalf("large layer did not resume: %+v", br)
	}
	if got := f.Reg.Served(f.Big); got != f.Size-br.Resumed {
		t.Errorf("resumed run read %d bytes of the large layer; want size %d - resumed %d", got, f.Size, br.Resumed)
	}
	if br.BytesFetched != f.Size-br.Resumed {
		t.Errorf("report bytes_fetched %d, want %d", br.BytesFetched, f.Size-br.Resumed)
	}
	im, ok := dk.Inspect(t, f.Ref)
	if !ok || im.ID != set.Images[0].Config.Digest.String() || len(im.RootFS.Layers) != 2 {
		t.Fatalf("docker image inspect %s: %+v (found %v)", f.Ref, im, ok)
	}
	if _, err := os.Stat(stage); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stage after the load: %v, want it removed", err)
	}

	// A tampered staged blob of the right size: refused (the stage
	// verifies what it holds), staged again from the registry, loaded.
	// --keep-stage keeps it.
	kept, err := targets.Open(context.Background(), warm.TargetSpec{Kind: "docker", Addr: dk.Socket}, targets.Options{DockerStage: stage, KeepStage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	l := warmtest.RandomLayer(t, "t.bin", 1<<20, 11)
	refT := f.Reg.Host + "/kiln-warm/app:tampered"
	testimage.Push(t, refT, testimage.Image(t, testimage.Config{}, l))
	ld := warmtest.DigestOf(t, l)
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
	f.Reg.ResetCounts()
	var logs []string
	rep, err = warm.Warm(context.Background(), warmtest.Resolve(t, context.Background(), src, warm.ResolveOptions{NoZstd: noZstd}, refT), kept,
		warm.Options{Log: func(format string, a ...any) { logs = append(logs, format) }})

	if err != nil || !rep.Ready {
		t.Fatalf("tampered stage: ready=%v err=%v", rep.Ready, err)
	}
	if f.Reg.Served(ld) != size {
		t.Errorf("tampered stage: served %d of %d bytes (%d log lines); want it staged again", f.Reg.Served(ld), size, len(logs))
	}
	if _, ok := dk.Inspect(t, refT); !ok {
		t.Error("tampered stage: image not loaded")
	}
	if fi, err := os.Stat(staged); err != nil || fi.Size() != size {
		t.Errorf("--keep-stage: staged layer %v", err)
	}
}
