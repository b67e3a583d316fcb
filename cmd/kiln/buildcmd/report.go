package buildcmd

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/sbom"
)

// writeBuildReport prints what kiln build did: one JSON object with
// --json, else a line per fact.
func writeBuildReport(opts *BuildOptions, plan *recipes.Plan, rep *builder.Report) {
	res, out := rep.Result, opts.IO.Out
	if opts.JSON {
		wheels := res.Wheels
		if wheels == nil {
			wheels = []builder.WheelUse{} // JSON [] rather than null
		}
		_ = cmdutil.WriteJSON(out, map[string]any{
			"name": plan.Name, "digest": res.Digest, "graph_digest": res.Graph,
			"push": opts.Push, "outputs": opts.Outputs, "pushed": res.Pushed, "signed": rep.Signed, "sbom": rep.SBOMs,
			"provenance": cmp.Or(opts.Provenance, "none"), "attestations": attestationNames(opts.Provenance, rep.Attested),
			"vertices": res.Status.Vertices, "cached": res.Status.Cached, "executed": res.Status.Executed,
			"reused": res.Reused, "content_tag": res.ContentTag, "inputs_digest": res.InputsDigest, "explain": rep.Explained,
			"wheels": wheels,
		})
		return
	}
	fmt.Fprintf(out, "image    %s\n", cmp.Or(res.Digest, "(not exported)"))
	if res.Reused {
		fmt.Fprintf(out, "reused   %s (up to date)\n", res.ContentTag)
	} else {
		fmt.Fprintf(out, "graph    %s\n", res.Graph)
		fmt.Fprintf(out, "steps    %d (%d cached, %d executed)\n", res.Status.Vertices, res.Status.Cached, res.Status.Executed)
		builder.WriteWheels(out, res.Wheels)
	}
	for _, p := range res.Pushed {
		fmt.Fprintf(out, "pushed   %s (%s, %s)\n", p.Ref, p.Compression, p.Digest)
		for _, pl := range slices.Sorted(maps.Keys(p.Images)) {
			fmt.Fprintf(out, "  image  %s %s\n", pl, p.Images[pl])
		}
	}
	if names := attestationNames(opts.Provenance, rep.Attested); len(names) > 0 {
		fmt.Fprintf(out, "attested %s\n", strings.Join(names, ", "))
	}
	for _, s := range rep.Signed {
		fmt.Fprintf(out, "signed   %s (key %s, %s)\n", s.Ref, s.KeyID, s.Format)
	}
	for _, o := range opts.Outputs {
		kind, path, _ := strings.Cut(o, ":")
		if abs, err := filepath.Abs(path); err == nil {
			o = kind + ":" + abs
		}
		fmt.Fprintf(out, "wrote    %s\n", o)
	}
	if rep.Explained != nil {
		rep.Explained.WriteText(out)
	}
}

// attestationNames lists what the attestation manifest beside each image
// holds: the provenance and kiln's own statements.
func attestationNames(prov string, bom bool) []string {
	var out []string
	if prov != "" {
		// builder adds kiln's parameters beside every provenance.
		out = append(out, "SLSA provenance v1 (mode="+prov+")", "kiln-build.json ("+builder.KilnParamsPredicateType+")")
	}
	if bom {
		out = append(out, "sbom.cdx.json ("+sbom.PredicateType+")", "sbom.spdx.json ("+sbom.SPDXPredicateType+")")
	}
	return out
}

// checkBuilt analyzes what the build wrote (ref) against the --check
// rules, requiring kernels for the recipe's GPUs.
func checkBuilt(ctx context.Context, opts *BuildOptions, plan *recipes.Plan, ref string, rules *analyze.Rules) error {
	for _, g := range plan.GPUs {
		rules.RequireGPUs = append(rules.RequireGPUs, g.Name)
	}
	img, err := layers.Open(ctx, ref, opts.registryOptions()...)
	if err != nil {
		return fmt.Errorf("--check: %w", err)
	}
	defer img.Close()
	progress := "auto"
	if opts.Progress == "none" {
		progress = "none"
	}
	rep, violations, err := cmdutil.CheckImage(ctx, opts.IO, progress, img, rules, nil, analyze.Options{})
	if err != nil {
		return fmt.Errorf("--check: %w", err)
	}
	if len(violations) == 0 {
		gpus := "no target GPU"
		if rep.Kernels != nil && len(rep.Kernels.GPUs) > 0 {
			var s []string
			for _, g := range rep.Kernels.GPUs {
				s = append(s, g.GPU+" "+g.ComputeCapability)
			}
			gpus = strings.Join(s, ", ")
		}
		fmt.Fprintf(opts.IO.ErrOut, "kiln: check %s passed: %s compressed, efficiency %.2f%%, kernels for %s\n",
			opts.Check, bytesize.Format(rep.CompressedSize), 100*rep.Waste.Efficiency, gpus)
		return nil
	}
	for _, v := range violations {
		fmt.Fprintf(opts.IO.ErrOut, "  ✗ %s: %s\n", v.Rule, v.Message)
	}
	fmt.Fprintf(opts.IO.ErrOut, "kiln: %d --check rule(s) broken in %s\n", len(violations), ref)
	return cmdutil.SilentExit(cmdutil.ExitRule)
}
