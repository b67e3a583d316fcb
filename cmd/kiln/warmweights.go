package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/weights"
)

// warmVolumes resolves the weights volumes of a warm: each image's
// dev.kiln.weights.manifest label and the WEIGHTS arguments. One volume
// goes into --weights-into DIR; several distinct volumes are refused (one
// DIR is one mount).
func warmVolumes(ctx context.Context, opts *WarmOptions, set *warm.Set, args []string, mirrors warm.Mirrors, lopts []layers.Option) ([]*warm.Volume, error) {
	args = append(append([]string(nil), args...), set.WeightsArgs...)
	if opts.WeightsInto == "" {
		if len(args) > 0 {
			return nil, usageErr("warm: %s is a weights artifact; pull its volume with --weights-into DIR", args[0])
		}
		return nil, nil
	}
	labels, err := set.WeightsRefs()
	if err != nil {
		return nil, err
	}
	var vols []*warm.Volume
	seen := map[string]bool{}
	add := func(v *warm.Volume) error {
		if seen[v.Manifest.SetDigest] {
			return nil
		}
		seen[v.Manifest.SetDigest] = true
		if len(vols) > 0 {
			return fmt.Errorf("--weights-into %s: %s and %s are different volumes (set digests %s, %s); one directory holds one volume: warm them separately", opts.WeightsInto, vols[0].Ref, v.Ref, vols[0].Manifest.SetDigest, v.Manifest.SetDigest)
		}
		vols = append(vols, v)
		return nil
	}
	for i, l := range labels {
		if l == "" {
			continue
		}
		v, err := warm.ResolveVolume(ctx, l, set.Images[i].Name, mirrors, lopts)
		if err != nil {
			return nil, err
		}
		if err := add(v); err != nil {
			return nil, err
		}
	}
	for _, a := range args {
		v, err := warm.ResolveVolume(ctx, a, "", mirrors, lopts)
		if err != nil {
			return nil, err
		}
		if err := add(v); err != nil {
			return nil, err
		}
	}
	if len(vols) == 0 {
		return nil, fmt.Errorf("--weights-into %s: no image carries a %s label and no WEIGHTS argument was given: nothing to pull", opts.WeightsInto, weights.LabelManifest)
	}
	return vols, nil
}

// mergeWeights folds the volumes' outcome into the warm report: the totals
// count weight bytes too, and the host is ready only when every volume
// verifies.
func mergeWeights(rep *warm.Report, wreps []*warm.WeightsReport) {
	for _, w := range wreps {
		rep.Weights = append(rep.Weights, w)
		rep.MissingBytes += w.MissingBytes
		rep.FetchedBytes += w.FetchedBytes
		for _, f := range w.Files {
			if f.State == warm.StatePresent {
				rep.PresentBytes += f.Size
			}
		}
		if w.State != warm.StatePresent && w.State != warm.StateFetched {
			rep.Ready = false
		}
	}
}

func writeWeightsTable(w io.Writer, wreps []*warm.WeightsReport) {
	if len(wreps) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "WEIGHTS\tDIR\tFILES\tSIZE\tSTATE\tFETCHED\tMISSING\n")
	for _, r := range wreps {
		n := map[string]int{}
		for _, f := range r.Files {
			n[f.State]++
		}
		var parts []string
		for _, s := range []string{warm.StatePresent, warm.StateFetched, warm.StateMissing, warm.StateFailed} {
			if n[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n[s], s))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Ref, r.Dir, strings.Join(parts, ", "), analyze.HumanBytes(r.Bytes), r.State, analyze.HumanBytes(r.FetchedBytes), analyze.HumanBytes(r.MissingBytes))
	}
	tw.Flush()
}

// runWeights warms vols into dir in the background; wait returns the
// reports and the first error.
func runWeights(ctx context.Context, vols []*warm.Volume, dir string, wo warm.WeightsOptions) (wait func() ([]*warm.WeightsReport, error)) {
	type out struct {
		reps []*warm.WeightsReport
		err  error
	}
	ch := make(chan out, 1)
	go func() {
		var o out
		for _, v := range vols {
			r, err := warm.WarmWeights(ctx, v, dir, wo)
			o.reps = append(o.reps, r)
			if err != nil && o.err == nil {
				o.err = err
			}
		}
		ch <- o
	}()
	return func() ([]*warm.WeightsReport, error) {
		o := <-ch
		return o.reps, o.err
	}
}
