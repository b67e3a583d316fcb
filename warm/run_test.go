package warm_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

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
