package warm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
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
	// Limiter, when set, caps the bytes per second read from the
	// registry across all blobs (NewLimiter); one limiter may be shared
	// with other transfers (the --weights-into pull).
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
	// Progress, when set, counts the layers' bytes as they are in: those
	// the target already holds (counted once asked), what an earlier run
	// left of a blob (counted as its fetch resumes) and those fetched.
	Progress *atomic.Int64
	// BlobProgress, when set, gives the counter of one layer's bytes as
	// its fetch starts (a bar per layer); that layer's bytes are counted
	// there instead of in Progress. Called from several goroutines.
	BlobProgress func(b *Blob) *atomic.Int64
	// Log, when set, receives one line per notable event (retries, resumes).
	Log func(format string, a ...any)
}

// errUnpackFailed is the fetch's cancel cause when the pipelined unpack
// failed: the run then ends with the unpack's error.
var errUnpackFailed = errors.New("the unpack failed")

// Warm makes t hold every blob of s, fetching what is missing from each
// blob's Source, then records the images (and unpacks them when asked). A
// Loader's missing blobs are fetched the same way, into the stage it
// opens, then loaded from there. The report is always returned; err says
// why the host is not ready.
func Warm(ctx context.Context, s *Set, tgt Target, o Options) (*Report, error) {
	o = o.withDefaults()
	if l, ok := tgt.(Loader); ok {
		return warmLoader(ctx, s, l, o)
	}
	if t, ok := tgt.(Store); ok {
		return warmStore(ctx, s, t, o)
	}
	return nil, fmt.Errorf("target %s: neither a blob store nor a loader", tgt)
}

func (o Options) withDefaults() Options {
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
	return o
}

// run is one warm's report as it is filled in.
type run struct {
	s     *Set
	o     Options
	rep   *Report
	start time.Time
	// claims are what the images' configs say each layer holds
	// (diffcheck.go); badVariants the variants whose layers are not
	// their image (image name → why), under mu.
	claims      map[digest.Digest][]claim
	mu          sync.Mutex
	badVariants map[string]string
	// proving: the target's unpack proves the layers it applies
	// (ProvingUnpacker); unproven are the fetched layers left to it, under mu.
	proving  bool
	unproven map[digest.Digest]*Blob
}

func newRun(s *Set, t Target, o Options) (*run, error) {
	r := &run{s: s, o: o, rep: NewReport(s), start: time.Now()}
	r.rep.Target = t.String()
	r.rep.DryRun = o.DryRun
	var err error
	r.claims, err = layerClaims(s)
	return r, err
}

// check reads layer b back from t and checks its content against what
// its images' configs claim (a target that cannot read blobs back is
// trusted with its own checks). A variant's failed claim is recorded for
// the VariantError.
func (r *run) check(ctx context.Context, t Store, b *Blob) error {
	op, ok := t.(Opener)
	if !ok || b.Kind != KindLayer {
		return nil
	}
	return r.record(checkLayer(ctx, op, b, r.claims[b.Digest]))
}

// record keeps a check's failed variant claims for the VariantError and
// returns its error.
func (r *run) record(bad map[string]string, err error) error {
	if len(bad) > 0 {
		r.mu.Lock()
		if r.badVariants == nil {
			r.badVariants = map[string]string{}
		}
		for k, v := range bad {
			r.badVariants[k] = v
		}
		r.mu.Unlock()
	}
	return err
}

// follower checks layer b's content as it is fetched, when its images'
// configs make claims about it (nil otherwise).
func (r *run) follower(ctx context.Context, b *Blob) *follower {
	if b.Kind != KindLayer || b.Data != nil || len(r.claims[b.Digest]) == 0 || r.leftToUnpack(b) {
		return nil
	}
	return &follower{ctx: ctx, b: b}
}

// leftToUnpack says whether layer b's check is the unpack's: the target's
// unpack proves what it applies, and no variant claims b (a variant that
// fails is set aside before anything is unpacked, so it is checked here).
func (r *run) leftToUnpack(b *Blob) bool {
	return r.proving && b.Kind == KindLayer && !hasVariant(r.claims[b.Digest])
}

// checkUnproven checks, by reading them back, the layers left to the
// unpack that it did not apply itself (a snapshot was there, or the
// daemon applied it).
func (r *run) checkUnproven(ctx context.Context, t Store, u UnpackReporter) error {
	trace, _, _ := u.UnpackTrace()
	applied := map[digest.Digest]bool{}
	for _, l := range trace {
		if l.How == HowStreamed || l.How == HowLocal {
			applied[l.Digest] = true
		}
	}
	r.mu.Lock()
	var left []*Blob
	for d, b := range r.unproven {
		if !applied[d] {
			left = append(left, b)
		}
	}
	r.mu.Unlock()
	for _, b := range left {
		if err := r.check(ctx, t, b); err != nil {
			return err
		}
	}
	return nil
}

// checkFetched is check for a blob just fetched: the verdict of the
// check that followed its bytes in when the committing try was followed
// from the first byte, else the committed blob read back.
func (r *run) checkFetched(ctx context.Context, t Store, b *Blob, f *follower, followed bool) error {
	if r.leftToUnpack(b) {
		r.mu.Lock()
		if r.unproven == nil {
			r.unproven = map[digest.Digest]*Blob{}
		}
		r.unproven[b.Digest] = b
		r.mu.Unlock()
		return nil
	}
	if f == nil || !followed || f.last == nil {
		return r.check(ctx, t, b)
	}
	got, err := f.last.result()
	return r.record(judge(b, r.claims[b.Digest], got, err))
}

// variantErr wraps err in a VariantError when a variant's layers proved
// not to be its image.
func (r *run) variantErr(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.badVariants) == 0 {
		return err
	}
	return &VariantError{Images: r.badVariants, Err: err}
}

// checkPresent checks the layers of variant images that the target
// already held (r.missing marked them present; fetched ones are checked as
// they are committed): a variant is proven by its bytes whether or not
// this run fetched them.
func (r *run) checkPresent(ctx context.Context, t Store) error {
	for i, b := range r.s.Blobs {
		if r.rep.Blobs[i].State != StatePresent || b.Kind != KindLayer || !hasVariant(r.claims[b.Digest]) {
			continue
		}
		if err := r.check(ctx, t, b); err != nil {
			return r.variantErr(fmt.Errorf("target %s: %v", t, err))
		}
	}
	return nil
}

// count adds n bytes of b to the progress: bytes that were there before
// this run (present, or left staged). The bars count the layers only: the
// index, manifests and configs were read while the set was resolved.
func (r *run) count(b *Blob, n int64) {
	if r.o.Progress != nil && b.Data == nil {
		r.o.Progress.Add(n)
	}
}

// fail ends the run with err.
func (r *run) fail(err error) (*Report, error) {
	r.rep.Error = err.Error()
	r.rep.Seconds = time.Since(r.start).Seconds()
	return r.rep, err
}

// done ends the run ready.
func (r *run) done() (*Report, error) {
	r.rep.Ready = true
	r.rep.Seconds = time.Since(r.start).Seconds()
	return r.rep, nil
}

// missing asks t for every blob of idx and returns those it lacks,
// counting present and missing bytes.
func (r *run) missing(ctx context.Context, t Store, idx []int) ([]int, error) {
	var missing []int
	for _, i := range idx {
		b := r.s.Blobs[i]
		ok, err := t.Has(ctx, b.Descriptor)
		if err != nil {
			return nil, fmt.Errorf("target %s: blob %s: %v", t, b.Digest, err)
		}
		if ok {
			r.rep.Blobs[i].State = StatePresent
			r.rep.PresentBytes += b.Size
			r.count(b, b.Size)
		} else {
			r.rep.Blobs[i].State = StateMissing
			r.rep.MissingBytes += b.Size
			missing = append(missing, i)
		}
	}
	return missing, nil
}

// fetch writes the blobs idx of the set into t, Concurrency at a time,
// and folds each outcome into the report. A blob fetched into a Loader's
// stage (staged) stays missing until the loader has loaded it. It returns
// why blobs failed (nil when all are in); rd hears of each blob as it
// settles.
func (r *run) fetch(ctx context.Context, t Store, idx []int, limit *rate.Limiter, rd *readiness, staged bool) error {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.o.Concurrency)
	for _, i := range idx {
		b := r.s.Blobs[i]
		g.Go(func() error {
			t0 := time.Now()
			f := r.follower(gctx, b)
			n, resumed, followed, err := fetchBlob(gctx, t, b, r.o, limit, f)
			if err == nil {
				// Before the blob counts as in: its content is what the
				// configs say (the unpack waits on rd for it).
				err = r.checkFetched(gctx, t, b, f, followed)
			}
			f.end()
			if rd != nil {
				rd.done(b.Digest, err)
			}
			mu.Lock()
			defer mu.Unlock()
			br := &r.rep.Blobs[i]
			br.BytesFetched += n
			if br.Resumed == 0 {
				br.Resumed = resumed
				r.rep.ResumedBytes += resumed
			}
			br.Seconds += time.Since(t0).Seconds()
			r.rep.FetchedBytes += n
			if err != nil {
				br.State = StateFailed
				br.Error = err.Error()
				// A full disk fails every blob: stop early.
				if blob.IsNoSpace(err) {
					return err
				}
				return nil
			}
			switch {
			case staged:
				br.State, br.Error = StateMissing, ""
				return nil
			case b.Data != nil:
				br.State = StateWritten
			default:
				br.State = StateFetched
			}
			r.rep.MissingBytes -= b.Size
			return nil
		})
	}
	gerr := g.Wait()
	if rd != nil {
		for _, i := range idx {
			rd.done(r.s.Blobs[i].Digest, errors.New("not fetched"))
		}
	}
	var failed []string
	for _, i := range idx {
		br := r.rep.Blobs[i]
		if br.State == StateFailed {
			failed = append(failed, registry.NameOnce(br.Digest, br.Error))
		} else if br.State == StateMissing && gerr != nil {
			failed = append(failed, br.Digest+": not fetched")
		}
	}
	if len(failed) > 0 {
		if gerr != nil && blob.IsNoSpace(gerr) {
			return fmt.Errorf("target %s: %w (disk full): %v; partial blobs are kept for a resumed run, nothing was committed half-written", t, preflight.ErrNoSpace, gerr)
		}
		return r.variantErr(fmt.Errorf("target %s: %d blob(s) failed: %s", t, len(failed), failed[0]))
	}
	return ctx.Err()
}

// gate is the readiness gate: t is asked again for every blob of idx.
func (r *run) gate(ctx context.Context, t Store, idx []int) error {
	for _, i := range idx {
		b := r.s.Blobs[i]
		ok, err := t.Has(ctx, b.Descriptor)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("target %s: blob %s is not present after the warm", t, b.Digest)
		}
	}
	return nil
}

func allBlobs(s *Set) []int {
	idx := make([]int, len(s.Blobs))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// warmStore warms a Store: per blob, asked and fetched.
func warmStore(ctx context.Context, s *Set, t Store, o Options) (*Report, error) {
	r, err := newRun(s, t, o)
	if err != nil {
		return r.fail(err)
	}
	defer func() { r.rep.Seconds = time.Since(r.start).Seconds() }()
	rep := r.rep
	missing, err := r.missing(ctx, t, allBlobs(s))
	if err != nil {
		return r.fail(err)
	}
	if err := r.checkPresent(ctx, t); err != nil {
		return r.fail(err)
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
			return r.fail(fmt.Errorf("target %s: %w: %s missing, %s free in %s", t, preflight.ErrNoSpace, bytesize.Format(rep.MissingBytes), bytesize.Format(avail), dir))
		}
	}
	lt, leased := t.(Leaser)
	if leased {
		if err := lt.Lease(ctx, s); err != nil {
			return r.fail(err)
		}
	}
	// --unpack, pipelined: layers are applied, in order, as soon as each
	// and the ones below it are committed, while later blobs still
	// download.
	var unpackDone chan error
	rd := newReadiness()
	if pu, ok := t.(ProvingUnpacker); ok && o.Unpack {
		r.proving = pu.ProvesLayers()
	}
	// A failed unpack stops the fetch: nothing fetched after it is used.
	fctx, stopFetch := context.WithCancelCause(ctx)
	defer stopFetch(nil)
	if pu, ok := t.(PipelinedUnpacker); ok && o.Unpack {
		for _, i := range missing {
			rd.pending(s.Blobs[i].Digest)
		}
		uctx, ucancel := context.WithCancel(ctx)
		unpackDone = make(chan error, 1)
		go func() {
			err := pu.UnpackAsReady(uctx, s, rd)
			if err != nil {
				stopFetch(errUnpackFailed)
			}
			unpackDone <- err
		}()
		defer func() {
			// Failure paths: stop the unpack before the target closes.
			ucancel()
			if unpackDone != nil {
				<-unpackDone
			}
		}()
	}
	if err := r.fetch(fctx, t, missing, o.Limiter, rd, false); err != nil {
		if context.Cause(fctx) != errUnpackFailed {
			return r.fail(err)
		}
		// The unpack's own error says why (below).
	}
	// The pipelined unpack ends before the images are recorded: it may be
	// what proves their layers (ProvingUnpacker).
	pipelined := o.Unpack && unpackDone != nil
	if pipelined {
		err := <-unpackDone
		unpackDone = nil
		if err != nil {
			return r.fail(fmt.Errorf("target %s: unpack: %v", t, err))
		}
		if ur, ok := t.(UnpackReporter); ok && r.proving {
			if err := r.checkUnproven(ctx, t, ur); err != nil {
				return r.fail(fmt.Errorf("target %s: %v", t, err))
			}
		}
		rep.Unpacked = true
		rep.Snapshotter = unpackedInto(t)
		if ur, ok := t.(UnpackReporter); ok && o.Log != nil {
			logUnpack(o.Log, ur)
		}
	}
	if err := t.Record(ctx, s); err != nil {
		return r.fail(fmt.Errorf("target %s: recording images: %v", t, err))
	}
	if o.Unpack && !pipelined {
		u, ok := t.(Unpacker)
		if !ok {
			return r.fail(fmt.Errorf("target %s: --unpack needs a containerd target", t))
		}
		if err := u.Unpack(ctx, s); err != nil {
			return r.fail(fmt.Errorf("target %s: unpack: %v", t, err))
		}
		rep.Unpacked = true
		rep.Snapshotter = unpackedInto(t)
	}
	if err := r.gate(ctx, t, allBlobs(s)); err != nil {
		return r.fail(err)
	}
	if v, ok := t.(Verifier); ok {
		if err := v.Verify(ctx, s); err != nil {
			return r.fail(err)
		}
	}
	if leased {
		// The image record and its GC labels hold the blobs from now on.
		if err := lt.Release(ctx); err != nil {
			return r.fail(fmt.Errorf("target %s: releasing lease: %v", t, err))
		}
	}
	return r.done()
}

// warmLoader warms a Loader: the blobs its plan stages are fetched into
// its stage (resumable, Range chunks, verified: a killed warm resumes from
// the staged bytes), then it loads them. A load that failed on kiln's side
// (a *StageError: nothing was loaded) stages what the stage lost and
// tries again.
func warmLoader(ctx context.Context, s *Set, l Loader, o Options) (*Report, error) {
	r, err := newRun(s, l, o)
	if err != nil {
		return r.fail(err)
	}
	rep := r.rep
	p, err := l.Plan(ctx, s)
	if err != nil {
		return r.fail(err)
	}
	for i := range rep.Blobs {
		rep.Blobs[i].State = StatePresent
	}
	for _, i := range p.Missing {
		rep.Blobs[i].State = StateMissing
	}
	for i, b := range rep.Blobs {
		if b.State == StatePresent {
			rep.PresentBytes += s.Blobs[i].Size
			r.count(s.Blobs[i], s.Blobs[i].Size)
		} else {
			rep.MissingBytes += s.Blobs[i].Size
		}
	}
	if o.DryRun {
		rep.Ready = len(p.Missing) == 0
		rep.Seconds = time.Since(r.start).Seconds()
		return rep, nil
	}
	st, err := l.Stage(ctx, s, p, !o.SkipSpaceCheck && rep.MissingBytes > 0)
	if err != nil {
		return r.fail(err)
	}
	// stage fetches what the stage lacks of p.Stage (or of again).
	stage := func(blobs []*Blob) error {
		var idx []int
		for _, b := range blobs {
			if _, i := s.Blob(b.Digest); i >= 0 {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			return nil
		}
		var err error
		var lacking []int
		for _, i := range idx {
			ok, herr := st.Has(ctx, s.Blobs[i].Descriptor)
			if herr != nil {
				err = fmt.Errorf("target %s: blob %s: %v", st, s.Blobs[i].Digest, herr)
				break
			}
			if !ok {
				lacking = append(lacking, i)
				continue
			}
			// Staged whole by an earlier run: resumed at its size.
			if br := &rep.Blobs[i]; br.Resumed == 0 && br.BytesFetched == 0 {
				br.Resumed = s.Blobs[i].Size
				rep.ResumedBytes += br.Resumed
				r.count(s.Blobs[i], br.Resumed)
			}
		}
		if err == nil {
			err = r.fetch(ctx, st, lacking, o.Limiter, nil, true)
		}
		if err == nil {
			err = r.gate(ctx, st, idx)
		}
		if err != nil {
			return fmt.Errorf("target %s: staging %d layer(s) in %s: %v (nothing was loaded; staged bytes are kept for the next run)", l, len(blobs), st, err)
		}
		return nil
	}
	if err := stage(p.Stage); err != nil {
		return r.fail(err)
	}
	for try := 1; ; try++ {
		err := l.Load(ctx, s, st)
		if err == nil {
			break
		}
		var se *StageError
		if !errors.As(err, &se) {
			return r.fail(err)
		}
		if _, i := s.Blob(se.Digest); i >= 0 {
			r.rep.Blobs[i].State, r.rep.Blobs[i].Error = StateFailed, se.BlobErr.Error()
		}
		if try >= o.Attempts || ctx.Err() != nil {
			return r.fail(err)
		}
		if o.Log != nil {
			o.Log("load into %s: try %d/%d failed: %v", l, try, o.Attempts, err)
		}
		// A staged blob that no longer verifies was removed: stage it
		// again (the others are present, so nothing else is read).
		var again []*Blob
		for _, b := range p.Stage {
			if st.Held(b.Descriptor) < b.Size {
				again = append(again, b)
			}
		}
		if err := stage(again); err != nil {
			return r.fail(err)
		}
	}
	for i := range rep.Blobs {
		if rep.Blobs[i].State == StateMissing || rep.Blobs[i].State == StateFailed {
			rep.Blobs[i].State, rep.Blobs[i].Error = StateFetched, ""
			rep.MissingBytes -= rep.Blobs[i].Size
		}
	}
	if v, ok := l.(Verifier); ok {
		if err := v.Verify(ctx, s); err != nil {
			return r.fail(err)
		}
	}
	if err := l.Unstage(ctx, s, st); err != nil && o.Log != nil {
		o.Log("%v (the image is loaded; remove it by hand)", err)
	}
	return r.done()
}

// NewLimiter paces reads to bps bytes per second, bursts of up to 1 MiB
// (nil for bps <= 0: no limit).
func NewLimiter(bps int64) *rate.Limiter { return blob.NewLimiter(bps) }

// fetchBlob writes b into t, resuming from what an earlier run left
// (blob.Copy: the one copy loop, with its retries and verify-before-
// commit rules). It returns the bytes read from the source and the offset
// it resumed from.
func fetchBlob(ctx context.Context, t Store, b *Blob, o Options, limit *rate.Limiter, f *follower) (int64, int64, bool, error) {
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
		return 0, 0, false, fmt.Errorf("blob %s: no source to read it from", b.Digest)
	}
	open := func(ctx context.Context) (blob.Writer, error) { return t.Writer(ctx, b.Descriptor) }
	co := blob.CopyOptions{
		Attempts: o.Attempts, ChunkSize: o.ChunkSize, ChunkThreshold: o.ChunkThreshold, Chunks: o.ChunksPerBlob,
		Limit: limit, Progress: progress, Log: o.Log,
	}
	if f != nil {
		co.Follow = f.next
	}
	res, err := blob.Copy(ctx, open, src, b.Hash(), b.Size, co)
	fetched := res.Fetched
	if b.Data != nil {
		fetched = 0
	}
	return fetched, res.Resumed, res.Followed, err
}

// logUnpack logs how --unpack applied the layers and, per layer, how and
// when (from the unpack's start): where the time of an unpack goes.
func logUnpack(log func(string, ...any), u UnpackReporter) {
	streamed, local, fellBack, why := u.Streamed()
	if fellBack > 0 {
		log("unpack: %d layer(s) applied while downloading, %d from committed blobs, %d by containerd after an in-process apply failed (last: %v)", streamed, local, fellBack, why)
	} else {
		log("unpack: %d layer(s) applied while downloading, %d from committed blobs", streamed, local)
	}
	trace, mode, stageWhy := u.UnpackTrace()
	if mode == "" {
		log("unpack: one layer at a time (%s)", stageWhy)
	} else {
		log("unpack: layers applied in parallel, joined to their chain by %s", mode)
	}
	for _, l := range trace {
		staged := ""
		if l.Staged {
			staged = ", ahead of its parent"
		}
		if l.How == HowPresent {
			log("unpack: layer %s: present", l.Digest)
			continue
		}
		log("unpack: layer %s (%s): %s%s, applied %.2f-%.2fs, blob verified at %.2fs, committed at %.2fs", l.Digest, bytesize.Format(l.Size), l.How, staged,
			l.Start.Seconds(), l.Applied.Seconds(), l.Verified.Seconds(), l.Committed.Seconds())
	}
}

// unpackedInto is the snapshotter a target unpacked into ("" when it
// has none).
func unpackedInto(t Target) string {
	if sn, ok := t.(interface{ Snapshotter() string }); ok {
		return sn.Snapshotter()
	}
	return ""
}
