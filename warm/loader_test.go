package warm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
)

// fakeLoader is a Loader without a daemon: it lacks every blob, stages
// the layers in an OCI layout, and "loads" by reading each staged layer
// back. Its first load finds the big layer gone bad in the stage.
type fakeLoader struct {
	stage   string
	bad     digest.Digest
	loads   int
	read    map[digest.Digest]digest.Digest // staged layer → what it hashed to
	unstage int
}

func (l *fakeLoader) String() string { return "fake:" + l.stage }
func (l *fakeLoader) Close() error   { return nil }

func (l *fakeLoader) Plan(ctx context.Context, s *warm.Set) (*warm.LoadPlan, error) {
	p := &warm.LoadPlan{}
	for i, b := range s.Blobs {
		p.Missing = append(p.Missing, i)
		if b.Kind == warm.KindLayer {
			p.Stage = append(p.Stage, b)
		}
	}
	return p, nil
}

func (l *fakeLoader) Stage(ctx context.Context, s *warm.Set, p *warm.LoadPlan, checkSpace bool) (warm.Stage, error) {
	return ocilayout.New(l.stage)
}

func (l *fakeLoader) Load(ctx context.Context, s *warm.Set, staged warm.Stage) error {
	l.loads++
	if l.loads == 1 {
		b, _ := s.Blob(l.bad)
		if err := staged.Remove(b.Descriptor); err != nil {
			return err
		}
		return &warm.StageError{Err: errors.New("nothing was loaded"), Digest: l.bad, BlobErr: errors.New("staged blob went bad")}
	}
	l.read = map[digest.Digest]digest.Digest{}
	for _, b := range s.Blobs {
		if b.Kind != warm.KindLayer {
			continue
		}
		r, err := staged.Open(b.Descriptor)
		if err != nil {
			return err
		}
		dg, err := digest.FromReader(r)
		r.Close()
		if err != nil {
			return err
		}
		l.read[b.Digest] = dg
	}
	return nil
}

func (l *fakeLoader) Unstage(ctx context.Context, s *warm.Set, staged warm.Stage) error {
	l.unstage++
	return nil
}

var _ warm.Loader = (*fakeLoader)(nil)

// The engine fills a Loader's stage with its own fetch (no Warm inside
// the adapter), hands the stage to Load, and after a load that failed on
// kiln's side stages again only what the stage lost.
func TestWarmLoaderStagedByEngine(t *testing.T) {
	ctx := context.Background()
	f := warmtest.PushFixture(t, false)
	set := warmtest.Resolve(t, ctx, warmtest.FastSource(), warm.ResolveOptions{}, f.Ref)
	l := &fakeLoader{stage: filepath.Join(t.TempDir(), "stage"), bad: digest.Digest(f.Big)}

	rep, err := warm.Warm(ctx, set, l, warm.Options{DryRun: true})
	if err != nil || rep.Ready || warmtest.BlobOf(rep, f.Big).State != warm.StateMissing || rep.MissingBytes != set.Bytes() {
		t.Fatalf("dry run: ready=%v big=%+v missing=%d err=%v", rep.Ready, warmtest.BlobOf(rep, f.Big), rep.MissingBytes, err)
	}
	if _, err := os.Stat(l.stage); !errors.Is(err, os.ErrNotExist) || l.loads != 0 {
		t.Fatalf("dry run staged (%v) or loaded (%d)", err, l.loads)
	}

	rep, err = warm.Warm(ctx, set, l, warm.Options{ChunkThreshold: 1 << 40})
	if err != nil || !rep.Ready {
		t.Fatalf("warm: ready=%v err=%v", rep.Ready, err)
	}
	if l.loads != 2 || l.unstage != 1 {
		t.Errorf("%d loads, %d unstages; want 2 (one retry) and 1", l.loads, l.unstage)
	}
	for dg, got := range l.read {
		if got != dg {
			t.Errorf("staged layer %s read back as %s", dg, got)
		}
	}
	if len(l.read) != 2 {
		t.Errorf("the load read %d staged layers, want 2", len(l.read))
	}
	// The big layer was staged twice (it went bad once), the small once.
	if f.Reg.Gets(f.Big) != 2 || f.Reg.Gets(f.Small) != 1 {
		t.Errorf("big layer read in %d GETs, small in %d; want big twice, small once", f.Reg.Gets(f.Big), f.Reg.Gets(f.Small))
	}
	big := warmtest.BlobOf(rep, f.Big)
	if big.State != warm.StateFetched || big.BytesFetched != 2*f.Size || big.Error != "" {
		t.Errorf("big layer: %+v", big)
	}
	if rep.MissingBytes != 0 || rep.FetchedBytes != 2*f.Size+warmtest.BlobOf(rep, f.Small).Size {
		t.Errorf("missing %d, fetched %d", rep.MissingBytes, rep.FetchedBytes)
	}

	// Issue 36: layers an earlier run staged whole are resumed at their
	// size, not read, and counted in the bar, which ends full.
	f.Reg.ResetCounts()
	again := &fakeLoader{stage: l.stage, loads: 1}
	var done atomic.Int64
	rep, err = warm.Warm(ctx, set, again, warm.Options{Progress: &done})
	layers := f.Size + warmtest.BlobOf(rep, f.Small).Size
	if err != nil || !rep.Ready || rep.FetchedBytes != 0 || f.Reg.TotalServed() != 0 {
		t.Fatalf("warm from a full stage: ready=%v fetched %d, served %d: %v", rep.Ready, rep.FetchedBytes, f.Reg.TotalServed(), err)
	}
	if rep.ResumedBytes != layers || warmtest.BlobOf(rep, f.Big).Resumed != f.Size || done.Load() != layers {
		t.Errorf("resumed %d (big %d), bar at %d; want %d", rep.ResumedBytes, warmtest.BlobOf(rep, f.Big).Resumed, done.Load(), layers)
	}
}
