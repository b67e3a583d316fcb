package analyzecmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/analyze/htmlreport"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/layers"
)

// AnalyzeOptions are kiln analyze's inputs.
type AnalyzeOptions struct {
	IO       *cmdutil.IO
	Image    string
	JSON     bool
	CIRules  string
	NoVerify bool
	Jobs     int
	Top      int
	Progress string
	Kernels  bool
	GPUs     []string
	HTML     string
	// Against is the baseline image the report is compared with
	// (--against OTHER): "" for none.
	Against string
	verbkit.ImageFlags
}

// NewCmdAnalyze is kiln analyze IMAGE.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdAnalyze(f *verbkit.Factory, runF func(*AnalyzeOptions) error) *cobra.Command {
	ios := f.IO
	opts := &AnalyzeOptions{IO: ios, ImageFlags: f.ImageFlags()}
	cmd := &cobra.Command{
		Use:   "analyze IMAGE",
		Short: "Report an image's layers, waste and CUDA dev-only files",
		Long: `Reads each layer once, as a stream, several at a time, and reports per-layer
sizes, bytes wasted by files that later layers overwrite or delete, dive's
efficiency score, and CUDA-aware findings: nvcc and toolkit binaries, headers,
static libraries, docs, pip/apt/conda caches, model weights (detected by
content) and CUDA libraries shipped twice, each with the fix to apply.

With --ci RULES.yaml kiln exits 3 when a rule breaks. Rule file keys:
max_size, max_compressed_size, min_efficiency, max_wasted_bytes,
forbid: [dev_tools, headers, static_libs, docs, caches, weights, cuda_libs],
max_class_bytes: {CLASS: SIZE}, forbid_duplicate_cuda_libs: true,
require_gpus: [h100, ...] (every library with device code has a kernel for it).

--kernels reads the shared libraries' fat binaries and lists the SASS (sm_XX)
and PTX architectures they carry; --gpu NAME checks that each library can run
on that GPU (a cubin of the same major and a lower-or-equal minor, or PTX the
driver can JIT), which is what "no kernel image is available" errors are about.

--html FILE also writes one self-contained page (no network): a treemap of
the final filesystem coloured by class or by layer, the waste list and the
CUDA facts.

--against OTHER compares IMAGE with a baseline (OTHER is the before, IMAGE
the after; any IMAGE form, read with the same flags) and prints what changed
instead of the full report: sizes before → after, the compressed bytes a
host that has OTHER pulls to get IMAGE (IMAGE's layers whose digests OTHER
lacks), the layers shared, added and removed, the classes whose bytes
changed, and the largest files added, removed, grown and shrunk (--top),
matched by path in each final filesystem. --json keeps IMAGE's report and
adds the comparison as "against"; --html colours the treemap by change. --ci
rules apply to IMAGE.`,
		Example: `  kiln analyze nvcr.io/nvidia/pytorch:24.05-py3
  kiln analyze 127.0.0.1:5000/app@sha256:4f1e...
  kiln analyze oci:./fixtures/oci:app --json > report.json
  kiln analyze docker-archive:app.tar --ci testdata/rules/runtime.yaml
  kiln analyze --platform linux/arm64 ghcr.io/acme/serve:1.2
  kiln analyze --gpu h100 --gpu l4 127.0.0.1:5000/acme/serve:1.2
  kiln analyze --html report.html nvidia/cuda:12.8.1-runtime-ubuntu24.04
  kiln analyze 127.0.0.1:5000/acme/serve:1.3 --against 127.0.0.1:5000/acme/serve:1.2
  kiln analyze oci:./out:app --against docker-daemon:app:prev --json --html diff.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Image = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runAnalyze)
		},
	}
	opts.ImageFlags.Register(cmd)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the report as JSON (schema: docs/analyze-json.md)")
	cmdutil.SetSchema(cmd, "kiln.analyze/v1")
	cmd.Flags().StringVar(&opts.CIRules, "ci", "", "check the report against a rules file; exit 3 when a rule breaks")
	cmd.Flags().BoolVar(&opts.NoVerify, "no-verify", false, "skip hashing local blobs (registry blobs are always verified)")
	cmd.Flags().IntVarP(&opts.Jobs, "jobs", "j", 0, "layers read at once (default: CPUs, at most 4)")
	cmd.Flags().IntVar(&opts.Top, "top", 10, "entries in each top-files list")
	cmdutil.ProgressFlag(cmd.Flags(), &opts.Progress)
	cmd.Flags().BoolVar(&opts.Kernels, "kernels", false, "scan shared libraries for device code (cubins, PTX) and report the GPU architectures covered")
	cmd.Flags().StringVar(&opts.HTML, "html", "", "also write the report as one self-contained HTML page (treemap, waste, CUDA) to FILE")
	cmd.Flags().StringVar(&opts.Against, "against", "", "compare with the baseline image OTHER (any IMAGE form): what IMAGE added, removed and grew, and the bytes a host with OTHER pulls")
	cmd.Flags().StringSliceVar(&opts.GPUs, "gpu", nil, "target GPU (h100, l4, sm_90, ...; repeatable): check every library has a kernel for it (implies --kernels)")
	return cmd
}

func runAnalyze(ctx context.Context, opts *AnalyzeOptions) error {
	if err := cmdutil.CheckProgress(opts.Progress); err != nil {
		return err
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return err
	}
	var rules *analyze.Rules
	if opts.CIRules != "" {
		if rules, err = analyze.LoadRules(opts.CIRules); err != nil {
			return cmdutil.UsageErr("--ci: %v", err)
		}
	}
	if _, err := analyze.ParseGPUTargets(opts.GPUs); err != nil {
		return cmdutil.UsageErr("%v", err)
	}
	if _, err := verbkit.CheckRef("", opts.Image, lopts...); err != nil {
		return err
	}
	if opts.Against != "" {
		if _, err := verbkit.CheckRef("--against", opts.Against, lopts...); err != nil {
			return err
		}
	}
	// The page's file is made first: a path that cannot be written is
	// said before minutes of reading layers, not after.
	var page *atomicfile.File
	if opts.HTML != "" {
		if page, err = atomicfile.Create(opts.HTML, 0o644); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
		defer page.Abort()
	}
	img, err := verbkit.OpenImage(ctx, opts.Image, lopts...)
	if err != nil {
		return imageErr(opts, err)
	}
	defer img.Close()
	// The baseline is opened before either is read: a reference that
	// does not resolve is said before minutes of reading the image.
	var base *layers.Image
	if opts.Against != "" {
		if base, err = verbkit.OpenImage(ctx, opts.Against, lopts...); err != nil {
			return againstErr(opts, err)
		}
		defer base.Close()
	}
	aopts := analyze.Options{Concurrency: opts.Jobs, SkipVerify: opts.NoVerify, TopN: opts.Top, Kernels: opts.Kernels, Tree: opts.HTML != "", Files: base != nil}
	rep, violations, err := verbkit.CheckImage(ctx, opts.IO, opts.Progress, img, rules, opts.GPUs, aopts)
	if err != nil {
		return imageErr(opts, err)
	}
	var diff *analyze.DiffReport
	if base != nil {
		// The baseline only needs its files, sizes and layers.
		baseRep, _, err := verbkit.CheckImage(ctx, opts.IO, opts.Progress, base, nil, nil,
			analyze.Options{Concurrency: opts.Jobs, SkipVerify: opts.NoVerify, TopN: opts.Top, Files: true})
		if err != nil {
			return againstErr(opts, err)
		}
		if diff, err = analyze.Diff(baseRep, rep, opts.Top); err != nil {
			return err
		}
	}
	if page != nil {
		if err := writeHTML(page, opts.HTML, rep, diff); err != nil {
			return err
		}
	}
	if opts.JSON {
		out := struct {
			*analyze.Report
			Against *analyze.DiffReport `json:"against,omitempty"`
			CI      *ciResult           `json:"ci,omitempty"`
		}{Report: rep, Against: diff}
		if rules != nil {
			out.CI = &ciResult{Rules: opts.CIRules, Passed: len(violations) == 0, Violations: violations}
			if out.CI.Violations == nil {
				out.CI.Violations = []analyze.Violation{}
			}
		}
		if err := cmdutil.WriteJSON(opts.IO.Out, out); err != nil {
			return err
		}
	} else {
		write := rep.WriteTable
		if diff != nil {
			write = diff.WriteTable
		}
		if err := write(opts.IO.Out, cmdutil.TableOptions(opts.IO.Out)...); err != nil {
			return err
		}
		if rules != nil {
			if len(violations) == 0 {
				fmt.Fprintf(opts.IO.Out, "\nCI %s: passed\n", opts.CIRules)
			} else {
				fmt.Fprintf(opts.IO.Out, "\nCI %s: %d rule(s) broken\n", opts.CIRules, len(violations))
				for _, v := range violations {
					fmt.Fprintf(opts.IO.Out, "  ✗ %s: %s\n", v.Rule, v.Message)
				}
			}
		}
	}
	if len(violations) > 0 {
		cmdutil.Notef(opts.IO.ErrOut, "%d --ci rule(s) broken", len(violations))
		return cmdutil.SilentExit(cmdutil.ExitRule)
	}
	return nil
}

// writeHTML writes the page and renames it into place: a reader never
// sees half a page.
func writeHTML(f *atomicfile.File, name string, rep *analyze.Report, diff *analyze.DiffReport) error {
	var o []htmlreport.Option
	if diff != nil {
		o = append(o, htmlreport.WithDiff(diff))
	}
	if err := htmlreport.Write(f, rep, o...); err != nil {
		return fmt.Errorf("--html %s: %w", name, err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("--html %s: %w", name, err)
	}
	return nil
}

// imageErr and againstErr say which of the two images failed when
// --against names a second one (an error alone names neither flag).
func imageErr(opts *AnalyzeOptions, err error) error {
	if opts.Against == "" {
		return err
	}
	return fmt.Errorf("the image analyzed (IMAGE): %w", err)
}

func againstErr(opts *AnalyzeOptions, err error) error {
	return fmt.Errorf("the baseline (--against): %w", err)
}

type ciResult struct {
	Rules      string              `json:"rules"`
	Passed     bool                `json:"passed"`
	Violations []analyze.Violation `json:"violations"`
}
