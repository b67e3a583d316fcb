package warm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/sign"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
)

// Schema is the --json report's schema name.
const Schema = "kiln.warm/v1"

// Blob states in a report.
const (
	StatePresent = "present"
	StateFetched = "fetched"
	// StateWritten: an index, manifest or config read and verified while
	// the set was resolved, written to the target from memory (nothing
	// fetched for it at this step, so bytes_fetched is 0).
	StateWritten = "written"
	StateMissing = "missing"
	StateFailed  = "failed"
)

// Options tune the engine.
type Options struct {
	// Concurrency is how many blobs are fetched at once (default 4).
	Concurrency int
	// ChunkSize and ChunkThreshold: blobs with at least ChunkThreshold
	// bytes left are read as parallel Range requests of ChunkSize bytes,
	// ChunksPerBlob at a time (defaults 16 MiB, 64 MiB, 4).
	ChunkSize      int64
	ChunkThreshold int64
	ChunksPerBlob  int
	// LimitRate caps the bytes per second read from the registry (0: no
	// limit), across all blobs.
	LimitRate int64
	// Limiter, when set, paces the reads instead of LimitRate: one
	// limiter shared with other transfers (the --weights-into pull).
	Limiter *rate.Limiter
	// DryRun only reports what is missing.
	DryRun bool
	// Unpack unpacks the images into the target's snapshotter.
	Unpack bool
	// SkipSpaceCheck skips the disk-space preflight (tests of the
	// write path's own disk-full handling).
	SkipSpaceCheck bool
	// Attempts is how many times a blob is tried (default 4): a transient
	// failure resumes from the bytes written, a digest mismatch starts over.
	Attempts int
	// Progress, when set, counts bytes fetched.
	Progress *atomic.Int64
	// BlobProgress, when set, gives the counter of one layer's bytes as
	// its fetch starts (a bar per layer); that layer's bytes are counted
	// there instead of in Progress. Called from several goroutines.
	BlobProgress func(b *Blob) *atomic.Int64
	// Log, when set, receives one line per notable event (retries, resumes).
	Log func(format string, a ...any)
}

// Report is what a warm found and did (the --json schema kiln.warm/v1).
type Report struct {
	Schema       string        `json:"schema"`
	Target       string        `json:"target"`
	Namespace    string        `json:"namespace"`
	Ready        bool          `json:"ready"`
	DryRun       bool          `json:"dry_run"`
	Images       []ImageReport `json:"images"`
	Blobs        []BlobReport  `json:"blobs"`
	MissingBytes int64         `json:"missing_bytes"`
	FetchedBytes int64         `json:"fetched_bytes"`
	PresentBytes int64         `json:"present_bytes"`
	Seconds      float64       `json:"seconds"`
	Unpacked     bool          `json:"unpacked,omitempty"`
	// Snapshotter is the containerd snapshotter --unpack unpacked into
	// (erofs: containers must run with it, ctr run --snapshotter erofs).
	Snapshotter string `json:"snapshotter,omitempty"`
	// Weights are the volumes warmed with --weights-into; their bytes
	// are counted in the totals above too.
	Weights []*WeightsReport `json:"weights,omitempty"`
	// Signatures are the --verify-key checks, one per image and weights
	// artifact, made before any layer was fetched.
	Signatures []*sign.Result `json:"signatures,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// ImageReport names one image of the warm set.
type ImageReport struct {
	Ref      string `json:"ref"`
	Digest   string `json:"digest"`
	Platform string `json:"platform"`
	// Manifest is the platform manifest's digest when Digest is an index.
	Manifest string `json:"manifest,omitempty"`
	// Source is the reference read when it differs from Ref (the zstd
	// variant).
	Source string `json:"source,omitempty"`
	// Mirror is the endpoint read from (--mirror).
	Mirror string `json:"mirror,omitempty"`
	// Note says why a variant beside Ref was not used (not the same
	// image in zstd).
	Note string `json:"note,omitempty"`
}

// BlobReport is one blob's outcome.
type BlobReport struct {
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	MediaType string `json:"media_type"`
	Kind      string `json:"kind"`
	State     string `json:"state"`
	// BytesFetched counts bytes read from the registry in this run (less
	// than Size when an earlier run's bytes were resumed).
	BytesFetched int64   `json:"bytes_fetched"`
	Resumed      int64   `json:"resumed_from,omitempty"`
	Seconds      float64 `json:"seconds"`
	Error        string  `json:"error,omitempty"`
}

// NewReport describes s before anything was checked.
func NewReport(s *Set) *Report {
	r := &Report{Schema: Schema, Images: []ImageReport{}, Blobs: []BlobReport{}}
	for _, img := range s.Images {
		ir := ImageReport{Ref: img.Name, Digest: img.Target.Digest.String(), Platform: img.Platform}
		if img.Manifest.Digest != img.Target.Digest {
			ir.Manifest = img.Manifest.Digest.String()
		}
		if img.Source != img.Name {
			ir.Source = img.Source
		}
		ir.Mirror, ir.Note = img.Mirror, img.Note
		r.Images = append(r.Images, ir)
	}
	for _, b := range s.Blobs {
		r.Blobs = append(r.Blobs, BlobReport{Digest: b.Digest.String(), Size: b.Size, MediaType: b.MediaType, Kind: string(b.Kind)})
	}
	return r
}

// Warm makes t hold every blob of s, fetching what is missing from each
// blob's Source,
// then records the images (and unpacks them when asked). The report is
// always returned; err says why the host is not ready.
func Warm(ctx context.Context, s *Set, tgt Target, o Options) (*Report, error) {
	if l, ok := tgt.(Loader); ok {
		return l.Load(ctx, s, o)
	}
	t, ok := tgt.(Store)
	if !ok {
		return nil, fmt.Errorf("target %s: neither a blob store nor a loader", tgt)
	}
	start := time.Now()
	rep := NewReport(s)
	rep.Target = t.String()
	rep.DryRun = o.DryRun
	defer func() { rep.Seconds = time.Since(start).Seconds() }()
	fail := func(err error) (*Report, error) {
		rep.Error = err.Error()
		rep.Seconds = time.Since(start).Seconds()
		return rep, err
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 16 << 20
	}
	if o.ChunkThreshold <= 0 {
		o.ChunkThreshold = 64 << 20
	}
	if o.ChunksPerBlob <= 0 {
		o.ChunksPerBlob = 4
	}
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	var missing []int
	for i, b := range s.Blobs {
		ok, err := t.Has(ctx, b.Descriptor)
		if err != nil {
			return fail(fmt.Errorf("target %s: blob %s: %v", t, b.Digest, err))
		}
		if ok {
			rep.Blobs[i].State = StatePresent
			rep.PresentBytes += b.Size
		} else {
			rep.Blobs[i].State = StateMissing
			rep.MissingBytes += b.Size
			missing = append(missing, i)
		}
	}
	if o.DryRun {
		rep.Ready = len(missing) == 0
		if rep.Ready {
			if v, ok := t.(Verifier); ok {
				if err := v.Verify(ctx, s); err != nil {
					rep.Ready = false
				}
			}
		}
		return rep, nil
	}
	if !o.SkipSpaceCheck && rep.MissingBytes > 0 {
		dir, avail, err := t.Free(ctx)
		if err == nil && avail < rep.MissingBytes {
			return fail(fmt.Errorf("target %s: %w: %s missing, %s free in %s", t, ErrNoSpace, bytesize.Format(rep.MissingBytes), bytesize.Format(avail), dir))
		}
	}
	lt, leased := t.(Leaser)
	if leased {
		if err := lt.Lease(ctx, s); err != nil {
			return fail(err)
		}
	}
	limit := o.Limiter
	if limit == nil {
		limit = NewLimiter(o.LimitRate)
	}
	// --unpack, pipelined: layers are applied, in order, as soon as each
	// and the ones below it are committed, while later blobs still
	// download.
	var unpackDone chan error
	rd := newReadiness()
	if pu, ok := t.(PipelinedUnpacker); ok && o.Unpack {
		for _, i := range missing {
			rd.pending(s.Blobs[i].Digest)
		}
		uctx, ucancel := context.WithCancel(ctx)
		unpackDone = make(chan error, 1)
		go func() { unpackDone <- pu.UnpackAsReady(uctx, s, rd) }()
		defer func() {
			// Failure paths: stop the unpack before the target closes.
			ucancel()
			if unpackDone != nil {
				<-unpackDone
			}
		}()
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Concurrency)
	for _, i := range missing {
		b := s.Blobs[i]
		g.Go(func() error {
			t0 := time.Now()
			n, resumed, err := fetchBlob(gctx, t, b, o, limit)
			rd.done(b.Digest, err)
			mu.Lock()
			defer mu.Unlock()
			br := &rep.Blobs[i]
			br.BytesFetched = n
			br.Resumed = resumed
			br.Seconds = time.Since(t0).Seconds()
			rep.FetchedBytes += n
			if err != nil {
				br.State = StateFailed
				br.Error = err.Error()
				// A full disk fails every blob: stop early.
				if errors.Is(err, errNoSpaceSys) {
					return err
				}
				return nil
			}
			br.State = StateFetched
			if b.Data != nil {
				br.State = StateWritten
			}
			rep.MissingBytes -= b.Size
			return nil
		})
	}
	gerr := g.Wait()
	for _, i := range missing {
		rd.done(s.Blobs[i].Digest, errors.New("not fetched"))
	}
	var failed []string
	for _, br := range rep.Blobs {
		if br.State == StateFailed {
			failed = append(failed, layers.NameOnce(br.Digest, br.Error))
		} else if br.State == StateMissing && gerr != nil {
			failed = append(failed, br.Digest+": not fetched")
		}
	}
	if len(failed) > 0 {
		if gerr != nil && errors.Is(gerr, errNoSpaceSys) {
			return fail(fmt.Errorf("target %s: %w (disk full): %v; partial blobs are kept for a resumed run, nothing was committed half-written", t, ErrNoSpace, gerr))
		}
		return fail(fmt.Errorf("target %s: %d blob(s) failed: %s", t, len(failed), failed[0]))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if err := t.Record(ctx, s); err != nil {
		return fail(fmt.Errorf("target %s: recording images: %v", t, err))
	}
	if o.Unpack && unpackDone != nil {
		err := <-unpackDone
		unpackDone = nil
		if err != nil {
			return fail(fmt.Errorf("target %s: unpack: %v", t, err))
		}
		rep.Unpacked = true
		rep.Snapshotter = unpackedInto(t)
		if st, ok := t.(interface {
			Streamed() (int64, int64, int64, error)
		}); ok && o.Log != nil {
			streamed, local, fellBack, why := st.Streamed()
			if fellBack > 0 {
				o.Log("unpack: %d layer(s) applied while downloading, %d from committed blobs, %d by containerd after an in-process apply failed (last: %v)", streamed, local, fellBack, why)
			} else {
				o.Log("unpack: %d layer(s) applied while downloading, %d from committed blobs", streamed, local)
			}
		}
		if tr, ok := t.(interface {
			UnpackTrace() ([]LayerTrace, string, string)
		}); ok && o.Log != nil {
			logUnpackTrace(o.Log, tr)
		}
	} else if o.Unpack {
		u, ok := t.(Unpacker)
		if !ok {
			return fail(fmt.Errorf("target %s: --unpack needs a containerd target", t))
		}
		if err := u.Unpack(ctx, s); err != nil {
			return fail(fmt.Errorf("target %s: unpack: %v", t, err))
		}
		rep.Unpacked = true
		rep.Snapshotter = unpackedInto(t)
	}
	// The readiness gate: ask the target again for every digest.
	for _, b := range s.Blobs {
		ok, err := t.Has(ctx, b.Descriptor)
		if err != nil {
			return fail(err)
		}
		if !ok {
			return fail(fmt.Errorf("target %s: blob %s is not present after the warm", t, b.Digest))
		}
	}
	if v, ok := t.(Verifier); ok {
		if err := v.Verify(ctx, s); err != nil {
			return fail(err)
		}
	}
	if leased {
		// The image record and its GC labels hold the blobs from now on.
		if err := lt.Release(ctx); err != nil {
			return fail(fmt.Errorf("target %s: releasing lease: %v", t, err))
		}
	}
	rep.Ready = true
	return rep, nil
}

// NewLimiter paces reads to bps bytes per second, bursts of up to 1 MiB
// (nil for bps <= 0: no limit).
func NewLimiter(bps int64) *rate.Limiter { return blob.NewLimiter(bps) }

// fetchBlob writes b into t, resuming from what an earlier run left
// (blob.Copy: the one copy loop, with its retries and verify-before-
// commit rules). It returns the bytes read from the source and the offset
// it resumed from.
func fetchBlob(ctx context.Context, t Store, b *Blob, o Options, limit *rate.Limiter) (int64, int64, error) {
	src, progress := b.Src, o.Progress
	if o.BlobProgress != nil && b.Kind == KindLayer {
		if c := o.BlobProgress(b); c != nil {
			progress = c
		}
	}
	if b.Data != nil {
		// Read and verified while resolving: written from memory, and not
		// counted as fetched.
		src, progress = blob.Bytes(b.Data), nil
	}
	if src == nil {
		return 0, 0, fmt.Errorf("blob %s: no source to read it from", b.Digest)
	}
	open := func(ctx context.Context) (blob.Writer, error) { return t.Writer(ctx, b.Descriptor) }
	res, err := blob.Copy(ctx, open, src, b.Hash(), b.Size, blob.CopyOptions{
		Attempts: o.Attempts, ChunkSize: o.ChunkSize, ChunkThreshold: o.ChunkThreshold, Chunks: o.ChunksPerBlob,
		Limit: limit, Progress: progress, Log: o.Log,
	})
	fetched := res.Fetched
	if b.Data != nil {
		fetched = 0
	}
	if err != nil && isNoSpace(err) {
		return fetched, res.Resumed, fmt.Errorf("blob %s: %w: %v", b.Digest, errNoSpaceSys, err)
	}
	return fetched, res.Resumed, err
}

// logUnpackTrace logs, per layer, how --unpack applied it and when (from
// the unpack's start): where the time of an unpack goes.
func logUnpackTrace(log func(string, ...any), t interface {
	UnpackTrace() ([]LayerTrace, string, string)
}) {
	trace, mode, why := t.UnpackTrace()
	if mode == "" {
		log("unpack: one layer at a time (%s)", why)
	} else {
		log("unpack: layers applied in parallel, joined to their chain by %s", mode)
	}
	for _, l := range trace {
		staged := ""
		if l.Staged {
			staged = ", ahead of its parent"
		}
		if l.How == howPresent {
			log("unpack: layer %s: present", l.Digest)
			continue
		}
		log("unpack: layer %s (%s): %s%s, applied %.2f-%.2fs, blob verified at %.2fs, committed at %.2fs", l.Digest, bytesize.Format(l.Size), l.How, staged,
			l.Start.Seconds(), l.Applied.Seconds(), l.Verified.Seconds(), l.Committed.Seconds())
	}
}
