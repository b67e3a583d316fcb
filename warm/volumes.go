package warm

import (
	"context"
	"fmt"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

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
func Volumes(ctx context.Context, set *Set, args []string, into string, lopts []registry.Option) ([]*Volume, error) {
	args = append(append([]string(nil), args...), set.WeightsArgs...)
	if into == "" {
		if len(args) > 0 {
			return nil, &NoVolumeDirError{Arg: args[0]}
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
	for _, a := range args {
		v, ok := set.volumes[a]
		if !ok {
			var err error
			if v, err = ResolveVolume(ctx, a, "", lopts); err != nil {
				return nil, err
			}
		}
		if err := add(v); err != nil {
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
