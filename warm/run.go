package warm

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/sign"
)

// RunOptions configure Run: one kiln warm, from references to a host
// that is ready (or a report of why not).
type RunOptions struct {
	// Target is the host's image store, opened (warm/targets opens the
	// one a --target names).
	Target Target
	// Namespace is the containerd namespace the report names ("" for
	// other targets).
	Namespace string
	// Refs are the images and weights artifacts, parsed where they were
	// read; Manifests the weights volume manifest files, read once
	// (localfile.ReadArg). Their volumes go into WeightsInto.
	Refs        []layers.Ref
	Manifests   []ManifestArg
	WeightsInto string
	// Resolve says how references resolve (platform, registry options,
	// blob source, compression, mirrors); Run fills NoZstd, and Erofs
	// with --unpack, from the target.
	Resolve ResolveOptions
	// Policy, when set, checks every image's and weights artifact's
	// signature before any layer is fetched.
	Policy *sign.Policy
	// Options tune the engine; Progress counts the images' and the
	// weights' bytes together and Limiter paces both.
	Options
	// Start, when set, is called once the set is resolved (and its
	// signatures checked) with the bytes the warm counts: the layers and
	// the weights. What it returns, when not nil, gives each layer its
	// own counter (Options.BlobProgress).
	Start func(total int64) func(b *Blob) *atomic.Int64
	// OnWeightsWait is called when another kiln weights pull holds the
	// weights volume.
	OnWeightsWait func()
}

// Run does one warm: it resolves the images and weights, checks their
// signatures (Policy), then fills the target and the weights volume at
// once. It returns a nil report when it failed before there was one (an
// unknown tag, a weights manifest without --weights-into:
// *NoVolumeDirError); a failed signature check (*UnverifiedError) returns
// the report with the signatures and nothing fetched.
func Run(ctx context.Context, o RunOptions) (*Report, error) {
	t := o.Target
	ro := o.Resolve
	if zc, ok := t.(ZstdChecker); ok {
		ro.NoZstd = zc.NoZstd(ctx)
	}
	if ec, ok := t.(ErofsChecker); ok && o.Unpack {
		ro.Erofs = ec.ErofsUnpack(ctx)
	}
	set, err := Resolve(ctx, o.Refs, ro)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	vols, err := Volumes(ctx, set, o.Manifests, o.WeightsInto, ro.Layers)
	if err != nil {
		return nil, err
	}
	var sigs []*sign.Result
	if o.Policy != nil {
		if sigs, err = VerifySignatures(ctx, o.Policy, set, vols, ro.Layers); err != nil {
			rep := NewReport(set)
			rep.Target, rep.Namespace, rep.DryRun, rep.Signatures, rep.Error = t.String(), o.Namespace, o.DryRun, sigs, err.Error()
			return rep, err
		}
	}
	eo := o.Options
	if o.Start != nil {
		// What the bars count: the layers (indexes, manifests and
		// configs were read while the set was resolved) and the weights.
		var total int64
		for _, b := range set.Blobs {
			if b.Data == nil {
				total += b.Size
			}
		}
		for _, v := range vols {
			total += v.Manifest.Size
		}
		if bp := o.Start(total); bp != nil {
			eo.BlobProgress = bp
		}
	}
	var waitWeights func() ([]*WeightsReport, error)
	if len(vols) > 0 {
		// Concurrency N: N weight blobs at once, at most 2N requests in
		// flight (the default 4 gives weights pull's own 4 and 8).
		waitWeights = StartWeights(ctx, vols, o.WeightsInto, WeightsOptions{
			DryRun: eo.DryRun, Progress: eo.Progress, Jobs: eo.Concurrency, Concurrency: 2 * eo.Concurrency,
			ChunkSize: eo.ChunkSize, Limiter: eo.Limiter, OnWait: o.OnWeightsWait,
		})
	}
	var rep *Report
	var werr error
	if len(set.Images) > 0 {
		rep, werr = Warm(ctx, set, t, eo)
		var ve *VariantError
		if errors.As(werr, &ve) && ro.Compression != CompressionZstd {
			// A variant whose layers are not its image is set aside, and
			// the images are warmed as named (their signatures checked
			// again: the set changed).
			rep, werr = warmAsNamed(ctx, o, ro, ve, eo, vols, &sigs)
		}
	} else {
		// Only weights: the target has nothing to hold.
		rep = NewReport(set)
		rep.Target, rep.DryRun, rep.Ready = t.String(), eo.DryRun, true
	}
	if waitWeights != nil {
		wreps, err := waitWeights()
		rep.MergeWeights(wreps)
		if err != nil && werr == nil {
			werr = err
			rep.Error = err.Error()
		}
	}
	rep.Namespace = o.Namespace
	rep.Signatures = sigs
	return rep, werr
}

// warmAsNamed warms the images again after a VariantError, without the
// variants it named: each is noted in the report, and the tag is warmed
// as named.
func warmAsNamed(ctx context.Context, o RunOptions, ro ResolveOptions, ve *VariantError, eo Options, vols []*Volume, sigs *[]*sign.Result) (*Report, error) {
	ro.NoVariant = maps.Clone(ro.NoVariant)
	if ro.NoVariant == nil {
		ro.NoVariant = map[string]string{}
	}
	for name, why := range ve.Images {
		ro.NoVariant[name] = why + "; set aside, warmed " + name + " as named"
		if eo.Log != nil {
			eo.Log("%s; warming %s as named", why, name)
		}
	}
	set, err := Resolve(ctx, o.Refs, ro)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	if o.Policy != nil {
		s, err := VerifySignatures(ctx, o.Policy, set, vols, ro.Layers)
		*sigs = s
		if err != nil {
			rep := NewReport(set)
			rep.Target, rep.DryRun, rep.Error = o.Target.String(), eo.DryRun, err.Error()
			return rep, err
		}
	}
	return Warm(ctx, set, o.Target, eo)
}
