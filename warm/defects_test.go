package warm_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/weights"
)

// F13: a layer descriptor that reuses another layer's digest with a false
// size is refused when the set is resolved, within one image and across
// the images of a set; the set's one copy of the blob would otherwise be
// warmed under the first size and reported READY while containerd's run
// fails "wrong diff id".
func TestResolveRefusesDuplicateDigestFalseSize(t *testing.T) {
	ctx := context.Background()
	reg := warmtest.NewRegistry(t)
	good := warmtest.RandomLayer(t, "a.bin", 3000, 13)
	n, _ := good.Size()
	honest := reg.Host + "/hostile/dup:honest"
	testimage.Push(t, honest, testimage.Image(t, testimage.Config{}, good)) // the blob, uploaded honestly
	for _, lie := range []int64{n + 512, n - 512} {
		one := reg.Host + "/hostile/dup:one"
		testimage.Push(t, one, testimage.Image(t, testimage.Config{}, good, testimage.SizeLie(good, lie)))
		other := reg.Host + "/hostile/dup:other"
		testimage.Push(t, other, testimage.Image(t, testimage.Config{}, testimage.SizeLie(good, lie)))
		for name, refs := range map[string][]string{"one image": {one}, "two images": {honest, other}} {
			_, err := warm.Resolve(ctx, testkit.Refs(t, refs...), warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()})
			if !errors.Is(err, registry.ErrSizeMismatch) {
				t.Errorf("%s (false size %d of %d): err = %v, want a size mismatch", name, lie, n, err)
			}
		}
	}
}

// testVolume publishes two weight files to an OCI layout and resolves the
// volume back as warm does.
func testVolume(t *testing.T) *warm.Volume {
	t.Helper()
	c, err := weights.NewCollector(t.TempDir(), weights.WithLargeFileThreshold(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{64 << 10, 8 << 10} {
		b := make([]byte, n)
		rand.New(rand.NewSource(int64(i))).Read(b)
		p := fmt.Sprintf("/models/m-%d.safetensors", i)
		if err := c.Divert(p, &tar.Header{Typeflag: tar.TypeReg, Name: p, Size: int64(n), Mode: 0o644}, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	lay := filepath.Join(t.TempDir(), "layout")
	if _, _, err := c.Publish(context.Background(), testkit.Ref(t, "oci:"+lay+":w"), "", "sha256:"+strings.Repeat("3", 64)); err != nil {
		t.Fatal(err)
	}
	v, err := warm.ResolveVolume(context.Background(), "oci:"+lay+":w", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// warmedVolume is testVolume warmed into a directory.
func warmedVolume(t *testing.T) (*warm.Volume, string) {
	t.Helper()
	v := testVolume(t)
	dir := filepath.Join(t.TempDir(), "vol")
	if _, err := warm.WarmWeights(context.Background(), v, dir, warm.WeightsOptions{}); err != nil {
		t.Fatal(err)
	}
	return v, dir
}

// flipByte rewrites one byte of file in place; keepTimes restores its
// modification time afterwards (a rewrite that only hashing finds).
func flipByte(t *testing.T, file string, keepTimes bool) {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(file, b, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
	if keepTimes {
		if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
}

// WarmWeights leaves the volume's marker to weights.Pull, which changes it
// only under the volume's lock: while another pull holds the lock, a warm
// that found a damaged file waits without touching .kiln-ready, and then
// heals the file.
func TestWarmWeightsKeepsMarkerOutsideLock(t *testing.T) {
	ctx := context.Background()
	v, dir := warmedVolume(t)
	marker := filepath.Join(dir, weights.ReadyMarker)
	flipByte(t, filepath.Join(dir, weights.ModelDir, "m-0.safetensors"), false)

	unlock, err := atomicfile.Lock(ctx, filepath.Join(dir, weights.LockFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep *warm.WeightsReport
		err error
	}
	done := make(chan result, 1)
	var waited atomic.Bool
	go func() {
		rep, err := warm.WarmWeights(ctx, v, dir, warm.WeightsOptions{OnWait: func() { waited.Store(true) }})
		done <- result{rep, err}
	}()
	time.Sleep(500 * time.Millisecond) // the warm verifies, then waits for the lock
	_, merr := os.Stat(marker)
	unlock()
	r := <-done
	if merr != nil {
		t.Errorf("the marker changed while another pull held the volume's lock: %v", merr)
	}
	if r.err != nil || r.rep.State != warm.StateFetched {
		t.Fatalf("warm after the lock was released: %+v %v", r.rep, r.err)
	}
	if !waited.Load() {
		t.Error("OnWait was not called while the warm waited for the lock")
	}
	if vr, err := weights.Verify(ctx, dir, nil, 2); err != nil || !vr.OK {
		t.Fatalf("volume does not verify after the warm: %+v %v", vr, err)
	}
}

// A same-size rewrite that keeps its modification time passes Pull's cheap
// ready check; the warm's verification found it, so the pull hashes the
// volume and heals it rather than reporting it already ready.
func TestWarmWeightsHealsRewriteKeepingTimes(t *testing.T) {
	ctx := context.Background()
	v, dir := warmedVolume(t)
	flipByte(t, filepath.Join(dir, weights.ModelDir, "m-0.safetensors"), true)
	rep, err := warm.WarmWeights(ctx, v, dir, warm.WeightsOptions{})
	if err != nil || rep.State != warm.StateFetched || rep.FetchedBytes != 64<<10 {
		t.Fatalf("warm of a volume with a rewritten file: %+v %v", rep, err)
	}
	if vr, err := weights.Verify(ctx, dir, nil, 2); err != nil || !vr.OK {
		t.Fatalf("volume does not verify after the warm: %+v %v", vr, err)
	}
}

// kiln warm fills volumes too: one left in kiln's old layout (the model
// files at the top level, beside the bookkeeping) is not ready, and the
// warm's pull moves the files into DIR/model by renames: every file stays
// present, nothing is fetched, and the volume verifies after.
func TestWarmWeightsMigratesOldLayout(t *testing.T) {
	ctx := context.Background()
	v, dir := warmedVolume(t)
	model := filepath.Join(dir, weights.ModelDir)
	ents, err := os.ReadDir(model)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(model, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(model); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, weights.LayoutMarker)); err != nil {
		t.Fatal(err)
	}
	rep, err := warm.WarmWeights(ctx, v, dir, warm.WeightsOptions{DryRun: true})
	if err != nil || rep.State != warm.StateMissing || rep.MissingBytes != 0 {
		t.Fatalf("dry run over the old layout: %+v %v, want not ready, no file missing", rep, err)
	}
	rep, err = warm.WarmWeights(ctx, v, dir, warm.WeightsOptions{})
	if err != nil || rep.State != warm.StateFetched || rep.FetchedBytes != 0 {
		t.Fatalf("warm over the old layout: %+v %v", rep, err)
	}
	for _, f := range rep.Files {
		if f.State != warm.StatePresent {
			t.Errorf("%s: %s, want present (moved, not fetched)", f.Path, f.State)
		}
		if _, err := os.Stat(filepath.Join(model, f.Path)); err != nil {
			t.Errorf("%s is not in %s: %v", f.Path, weights.ModelDir, err)
		}
	}
	if vr, err := weights.Verify(ctx, dir, nil, 2); err != nil || !vr.OK {
		t.Fatalf("volume does not verify after the warm: %+v %v", vr, err)
	}
	if rep, err := warm.WarmWeights(ctx, v, dir, warm.WeightsOptions{}); err != nil || rep.State != warm.StatePresent {
		t.Fatalf("warm after the move: %+v %v, want present", rep, err)
	}
}
