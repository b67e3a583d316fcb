package compatcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/internal/termtable"
)

// CompatDriverOptions are kiln compat driver's inputs.
type CompatDriverOptions struct {
	IO     *cmdutil.IO
	CUDA   string
	Driver string
	GPU    string
	JSON   bool
}

// CompatGPUOptions are kiln compat gpu's inputs.
type CompatGPUOptions struct {
	IO   *cmdutil.IO
	GPU  string
	CUDA string
	JSON bool
}

func NewCmdCompat(f *verbkit.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compat",
		Short: "Check CUDA/driver and GPU/toolkit compatibility; refresh the compatibility data",
		Example: `  kiln compat driver --cuda 12.8 --driver 550.54.15 --gpu rtx4090
  kiln compat gpu t4 --cuda 13.0
  kiln compat refresh -o compat.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.UsageErr("compat needs a subcommand: driver, gpu or refresh")
		},
	}
	cmd.AddCommand(NewCmdCompatDriver(f, nil), NewCmdCompatGPU(f, nil), NewCmdCompatRefresh(f, nil))
	return cmd
}

// NewCmdCompatDriver is kiln compat driver.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdCompatDriver(f *verbkit.Factory, runF func(*CompatDriverOptions) error) *cobra.Command {
	ios := f.IO
	opts := &CompatDriverOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "driver --cuda VERSION --driver VERSION [--gpu NAME]",
		Short: "Can an image of a CUDA version run on a host driver",
		Long: `Decides whether a container built on CUDA --cuda starts and runs on a host
with driver --driver (and GPU --gpu): natively (the driver's CUDA version is
at least the image's), through minor-version compatibility (same CUDA major,
driver at least the floor: SASS-only code), or through forward compatibility
(the image's cuda-compat libraries; data-center GPUs only). The image's
NVIDIA_REQUIRE_CUDA is evaluated like libnvidia-container does: its brand
clauses refuse, at container start, a 12.5+ image on a GeForce host whose
driver is older than the image.

JSON keys: compatible, mode (native, minor-version, forward-compat, none),
min_driver, reason. Exit 0 when compatible, 1 when not.`,
		Example: `  kiln compat driver --cuda 12.4 --driver 550.54.15
  kiln compat driver --cuda 12.8 --driver 550.54 --gpu rtx4090
  kiln compat driver --cuda 13.0 --driver 535.104.05 --gpu h100 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.Run(cmd.Context(), opts, runF, runCompatDriver)
		},
	}
	cmd.Flags().StringVar(&opts.CUDA, "cuda", "", "the image's CUDA version (12.4 or 12.4.1)")
	cmd.Flags().StringVar(&opts.Driver, "driver", "", "the host's NVIDIA driver version (e.g. 550.54.15)")
	cmd.Flags().StringVar(&opts.GPU, "gpu", "", "the host's GPU (h100, rtx4090, sm_89, ...)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the verdict as JSON")
	cmdutil.SetSchema(cmd, "kiln.compat-driver/v1")
	return cmd
}

func runCompatDriver(_ context.Context, opts *CompatDriverOptions) error {
	if opts.CUDA == "" || opts.Driver == "" {
		return cmdutil.UsageErr("compat driver needs --cuda and --driver")
	}
	if _, err := cuda.ParseVersion(opts.CUDA); err != nil {
		return cmdutil.UsageErr("--cuda: %v", err)
	}
	if _, err := cuda.ParseVersion(opts.Driver); err != nil {
		return cmdutil.UsageErr("--driver: %v", err)
	}
	if opts.GPU != "" {
		if _, err := cuda.GPU(opts.GPU); err != nil {
			return cmdutil.UsageErr("--gpu: %v", err)
		}
	}
	v := cuda.CheckDriver(opts.CUDA, opts.Driver, opts.GPU)
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, v); err != nil {
			return err
		}
	} else {
		verdict := "compatible"
		if !v.Compatible {
			verdict = "NOT compatible"
		}
		// The reason and the alternatives are prose: wrapped at the
		// terminal's width (80 on a pipe).
		out, to := opts.IO.Out, termtable.Resolve(cmdutil.TableOptions(opts.IO.Out)...)
		fmt.Fprintf(out, "%s (mode: %s)\n", termtable.Paint(to.Color, map[bool]string{true: termtable.Green, false: termtable.Red}[v.Compatible], verdict), v.Mode)
		termtable.Fprintw(out, to.Width, "", "", v.Reason)
		if v.MinDriver != "" {
			termtable.Fprintw(out, to.Width, "min driver: ", "", fmt.Sprintf("%s (toolkit), %s (minor-version compatibility)", v.MinDriver, v.MinDriverMVC))
		}
		if !v.Compatible {
			for _, a := range v.Alternatives {
				termtable.Fprintw(out, to.Width, "  try: ", "", a)
			}
		}
	}
	if !v.Compatible {
		return cmdutil.ReportedExit(cmdutil.ExitFailure, "not compatible: %s", v.Reason)
	}
	return nil
}

// gpuVerdict is kiln compat gpu's JSON.
type gpuVerdict struct {
	GPU               string `json:"gpu"`
	Arch              string `json:"arch"`
	ComputeCapability string `json:"compute_capability"`
	CUDA              string `json:"cuda"`
	Supported         bool   `json:"supported"`
	Reason            string `json:"reason"`
	Source            string `json:"source"`
	Confidence        string `json:"confidence"`
}

// NewCmdCompatGPU is kiln compat gpu.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdCompatGPU(f *verbkit.Factory, runF func(*CompatGPUOptions) error) *cobra.Command {
	ios := f.IO
	opts := &CompatGPUOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "gpu NAME|sm_XX --cuda VERSION",
		Short: "A GPU's compute capability and whether a CUDA toolkit can build for it",
		Long: `Prints the GPU's compute capability and whether CUDA --cuda can compile for it
(e.g. CUDA 13 dropped Maxwell, Pascal and Volta; Hopper needs CUDA 11.8+).
JSON keys: compute_capability, supported, reason. Exit 0 when supported, 1 when not.`,
		Example: `  kiln compat gpu h100 --cuda 12.4
  kiln compat gpu t4 --cuda 13.0
  kiln compat gpu sm_70 --cuda 13.0 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.GPU = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runCompatGPU)
		},
	}
	cmd.Flags().StringVar(&opts.CUDA, "cuda", "", "the CUDA toolkit version (12.8, 13.0, ...)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the verdict as JSON")
	cmdutil.SetSchema(cmd, "kiln.compat-gpu/v1")
	return cmd
}

func runCompatGPU(_ context.Context, opts *CompatGPUOptions) error {
	if opts.CUDA == "" {
		return cmdutil.UsageErr("compat gpu needs --cuda")
	}
	if _, err := cuda.ParseVersion(opts.CUDA); err != nil {
		return cmdutil.UsageErr("--cuda: %v", err)
	}
	info, err := cuda.GPU(opts.GPU)
	if err != nil {
		return cmdutil.UsageErr("%v", err)
	}
	ok, why, row := cuda.ArchSupported(opts.CUDA, info.ComputeCapability)
	v := gpuVerdict{GPU: info.Name, Arch: "sm_" + stripDot(info.ComputeCapability), ComputeCapability: info.ComputeCapability, CUDA: opts.CUDA, Supported: ok, Reason: why, Source: info.Source, Confidence: info.Confidence}
	if row != nil {
		v.Source = info.Source + "; toolkit support: " + row.Source
		v.Confidence = worst(info.Confidence, row.Confidence)
	}
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, v); err != nil {
			return err
		}
	} else {
		state := "supported"
		if !ok {
			state = "NOT supported"
		}
		fmt.Fprintf(opts.IO.Out, "%s: compute capability %s (%s)\n", info.Name, info.ComputeCapability, v.Arch)
		termtable.Fprintw(opts.IO.Out, cmdutil.TermWidth(opts.IO.Out), "", "  ", fmt.Sprintf("CUDA %s: %s: %s", opts.CUDA, state, why))
	}
	if !ok {
		return cmdutil.ReportedExit(cmdutil.ExitFailure, "%s: CUDA %s: NOT supported: %s", info.Name, opts.CUDA, why)
	}
	return nil
}

func stripDot(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '.' {
			out = append(out, s[i])
		}
	}
	return string(out)
}

// worst returns the weaker of two confidence tags.
func worst(a, b string) string {
	rank := map[string]int{"A": 0, "B": 1, "C": 2, "UNVERIFIED": 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
