package buildcmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

// checkBuilt analyzes what the build wrote (ref) against the --check
// rules, requiring kernels for the recipe's GPUs.
func checkBuilt(ctx context.Context, opts *BuildOptions, plan *recipes.Plan, ref layers.Ref, rules *analyze.Rules) error {
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
	rep, violations, err := verbkit.CheckImage(ctx, opts.IO, progress, img, rules, nil, analyze.Options{})
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
	cmdutil.Notef(opts.IO.ErrOut, "%d --check rule(s) broken in %s", len(violations), ref)
	return cmdutil.SilentExit(cmdutil.ExitRule)
}
