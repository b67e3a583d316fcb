package warm_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/weights"

	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
)

// warm.Run is kiln warm's workflow without its verb: the bars start once
// the set is resolved, with the bytes of the layers (not of the index,
// manifests and configs, read while resolving), each layer gets its own
// counter, and the report names the namespace it was given. A weights
// manifest without a volume directory fails before there is a report.
func TestRunStartsWithLayerBytes(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	tgt, err := ocilayout.New(filepath.Join(t.TempDir(), "oci"))
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	var total int64
	var counters atomic.Int32
	starts := 0
	rep, err := warm.Run(ctx, warm.RunOptions{
		Target: tgt, Namespace: "ns", Refs: testkit.Refs(t, f.Ref),
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
		Options: warm.Options{Progress: &done},
		Start: func(n int64) func(*warm.Blob) *atomic.Int64 {
			starts++
			total = n
			return func(*warm.Blob) *atomic.Int64 { counters.Add(1); return &done }
		},
	})
	if err != nil || !rep.Ready || rep.Namespace != "ns" {
		t.Fatalf("run: ready=%v namespace=%q err=%v", rep != nil && rep.Ready, rep.Namespace, err)
	}
	small := warmtest.BlobOf(rep, f.Small).Size
	if starts != 1 || total != f.Size+small || counters.Load() != 2 || done.Load() != total {
		t.Errorf("started %d times with %d bytes (layers %d), %d layer counters, %d bytes counted", starts, total, f.Size+small, counters.Load(), done.Load())
	}

	// Run again: every layer is present, and the bar starts full (it
	// stayed at 0 %, never drawn done).
	var again atomic.Int64
	rep, err = warm.Run(ctx, warm.RunOptions{
		Target: tgt, Refs: testkit.Refs(t, f.Ref),
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
		Options: warm.Options{Progress: &again},
		Start: func(n int64) func(*warm.Blob) *atomic.Int64 {
			total = n
			return func(*warm.Blob) *atomic.Int64 { return &again }
		},
	})
	if err != nil || !rep.Ready || rep.FetchedBytes != 0 || again.Load() != total {
		t.Errorf("rerun: ready=%v fetched %d, bars counted %d of %d: %v", rep != nil && rep.Ready, rep.FetchedBytes, again.Load(), total, err)
	}

	rep, err = warm.Run(ctx, warm.RunOptions{
		Target: tgt, Manifests: []warm.ManifestArg{{Path: "weights.json", Manifest: &weights.Manifest{}}},
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
	})
	if nv := (*warm.NoVolumeDirError)(nil); rep != nil || !errors.As(err, &nv) {
		t.Errorf("weights without --weights-into: report %v, err %v", rep, err)
	}
}

// refusingUnpacker is an OCI layout whose pipelined unpack refuses the set
// at once, as containerd's does an image of EROFS layers for overlayfs.
type refusingUnpacker struct{ *ocilayout.OCILayout }

var errRefused = errors.New("the unpack refuses this set")

func (refusingUnpacker) UnpackAsReady(context.Context, *warm.Set, warm.Readiness) error {
	return errRefused
}
func (refusingUnpacker) Unpack(context.Context, *warm.Set) error { return errRefused }

// A pipelined unpack that fails stops the fetch: the warm ends with the
// unpack's error while a blob is still arriving (here a slow one),
// rather than after every byte was fetched for nothing. It waited for the
// whole fetch before.
func TestRunUnpackFailureStopsTheFetch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := warmtest.PushFixture(t, false)
	// Its ~6 MiB arrive over half a minute.
	f.Reg.Slow(f.Big, 200*time.Millisecond)
	l, err := ocilayout.New(filepath.Join(t.TempDir(), "oci"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err = warm.Run(ctx, warm.RunOptions{
		Target: refusingUnpacker{l}, Refs: testkit.Refs(t, f.Ref),
		Resolve: warm.ResolveOptions{Platform: warmtest.AMD64, Blobs: warmtest.FastSource()},
		Options: warm.Options{Unpack: true},
	})
	if err == nil || !strings.Contains(err.Error(), errRefused.Error()) {
		t.Fatalf("warm: %v, want the unpack's error", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("the warm ended %v after the unpack failed", d)
	}
}
