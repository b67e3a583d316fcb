package warm

import (
	"context"
	"fmt"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/weights"
)

// ManifestArg is a weights volume manifest file kiln warm was named, read
// once (localfile.ReadArg, weights.DecodeManifestFile).
type ManifestArg struct {
	Path     string
	Manifest *weights.Manifest
}

// NoVolumeDirError is returned when a weights artifact is named but no
// directory was given to hold its volume (a usage error).
type NoVolumeDirError struct{ Arg string }

func (e *NoVolumeDirError) Error() string {
	return "warm: " + e.Arg + " is a weights artifact; pull its volume with --weights-into DIR"
}

// Volumes resolves the weights volumes of a warm: each image's
// dev.kiln.weights.manifest label and the WEIGHTS arguments (and those the
// set found among its arguments). One volume goes into the directory into;
// several distinct volumes are refused (one directory is one mount).
func Volumes(ctx context.Context, set *Set, files []ManifestArg, into string, lopts []registry.Option) ([]*Volume, error) {
	if into == "" {
		switch {
		case len(files) > 0:
			return nil, &NoVolumeDirError{Arg: files[0].Path}
		case len(set.WeightsArgs) > 0:
			return nil, &NoVolumeDirError{Arg: set.WeightsArgs[0]}
		}
		return nil, nil
	}
	labels, err := set.WeightsRefs()
	if err != nil {
		return nil, err
	}
	var vols []*Volume
	seen := map[string]bool{}
	add := func(v *Volume) error {
		if seen[v.Manifest.SetDigest] {
			return nil
		}
		seen[v.Manifest.SetDigest] = true
		if len(vols) > 0 {
			return fmt.Errorf("--weights-into %s: %s and %s are different volumes (set digests %s, %s); one directory holds one volume: warm them separately", into, vols[0].Ref, v.Ref, vols[0].Manifest.SetDigest, v.Manifest.SetDigest)
		}
		vols = append(vols, v)
		return nil
	}
	for i, l := range labels {
		if l == "" {
			continue
		}
		v, err := ResolveVolume(ctx, l, set.Images[i].Name, lopts)
		if err != nil {
			return nil, err
		}
		if err := add(v); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		res, err := weights.ResolveManifest(ctx, f.Manifest, "", lopts...)
		if err != nil {
			return nil, fmt.Errorf("weights %s: %w", f.Path, err)
		}
		if res.Source == nil {
			return nil, fmt.Errorf("weights %s: the manifest names no repository to fetch its blobs from", f.Path)
		}
		if err := add(&Volume{Ref: f.Path, Resolved: res}); err != nil {
			return nil, err
		}
	}
	// The weights artifacts among the references: resolved from the
	// manifest the set read.
	for _, a := range set.WeightsArgs {
		if err := add(set.volumes[a]); err != nil {
			return nil, err
		}
	}
	if len(vols) == 0 {
		return nil, fmt.Errorf("--weights-into %s: no image carries a %s label and no WEIGHTS argument was given: nothing to pull", into, layers.LabelWeightsManifest)
	}
	return vols, nil
}

// MergeWeights folds the volumes' outcome into the warm report: the totals
// count weight bytes too, and the host is ready only when every volume
// verifies.
func (rep *Report) MergeWeights(wreps []*WeightsReport) {
	for _, w := range wreps {
		rep.Weights = append(rep.Weights, w)
		rep.MissingBytes += w.MissingBytes
		rep.FetchedBytes += w.FetchedBytes
		rep.ResumedBytes += w.ResumedBytes
		for _, f := range w.Files {
			if f.State == StatePresent {
				rep.PresentBytes += f.Size
			}
		}
		if w.State != StatePresent && w.State != StateFetched {
			rep.Ready = false
		}
	}
}

// StartWeights warms vols into dir in the background (beside the image
// blobs); wait returns the reports and the first error.
func StartWeights(ctx context.Context, vols []*Volume, dir string, wo WeightsOptions) (wait func() ([]*WeightsReport, error)) {
	type out struct {
		reps []*WeightsReport
		err  error
	}
	ch := make(chan out, 1)
	go func() {
		var o out
		for _, v := range vols {
			r, err := WarmWeights(ctx, v, dir, wo)
			o.reps = append(o.reps, r)
			if err != nil && o.err == nil {
				o.err = err
			}
		}
		ch <- o
	}()
	return func() ([]*WeightsReport, error) {
		o := <-ch
		return o.reps, o.err
	}
}
