package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/kiln-build/kiln/recipes"
	"github.com/spf13/cobra"
)

// recipeFlags are shared by resolve, lock and build: overrides for the
// recipe's registry mirror and wheel indexes, and the compatibility data.
type recipeFlags struct {
	Mirror       string
	mirrorSet    bool
	WheelIndexes []string
	// CompatData is a refreshed data file (kiln compat refresh); "" means
	// $KILN_COMPAT_DATA, and unset that, the embedded data.
	CompatData string
}

func (f *recipeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.Mirror, "mirror", "", "pull nvidia/cuda base images through this registry (overrides registry_mirror; \"\" removes it)")
	cmd.Flags().StringSliceVar(&f.WheelIndexes, "wheel-index", nil, "PEP 503/691 index URL for torch, flash-attn, bitsandbytes and pip extras (repeatable; overrides wheel_indexes)")
	cmd.Flags().StringVar(&f.CompatData, "compat-data", "", "compatibility data file written by kiln compat refresh (default $"+recipes.DataEnv+"; unset: kiln's embedded data)")
}

// compatData loads the data file the flag or the environment names; nil
// means the embedded data.
func (f *recipeFlags) compatData() (*recipes.DB, error) {
	path := f.CompatData
	if path == "" {
		path = os.Getenv(recipes.DataEnv)
	}
	if path == "" {
		return nil, nil
	}
	return recipes.LoadDataFile(path)
}

func (f *recipeFlags) resolveOptions() ([]recipes.ResolveOption, error) {
	var o []recipes.ResolveOption
	if f.mirrorSet {
		o = append(o, recipes.WithMirror(f.Mirror))
	}
	if len(f.WheelIndexes) > 0 {
		o = append(o, recipes.WithWheelIndexes(f.WheelIndexes...))
	}
	db, err := f.compatData()
	if err != nil {
		return nil, err
	}
	if db != nil {
		o = append(o, recipes.WithData(db))
	}
	return o, nil
}

// ResolveOptions are kiln resolve's inputs.
type ResolveOptions struct {
	IO     *IO
	File   string
	JSON   bool
	Locked bool
	// MaxDataAge is how many days old the torch and nvidia/cuda facts may
	// be before the plan warns (0: recipes.DefaultMaxDataAgeDays).
	MaxDataAge int
	recipeFlags
	// Now is the clock the data's age is measured with (nil: time.Now).
	Now func() time.Time
}

func newResolveCmd(ios *IO) *cobra.Command {
	opts := &ResolveOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "resolve [FILE]",
		Short: "Resolve a recipe (kiln.yaml) into exact versions, base images and wheels",
		Long: `Reads a recipe (default ./kiln.yaml) and prints the plan: CUDA, cuDNN, Python,
torch and its CUDA wheel variant, the FlashAttention wheel (or how it is
built from source), bitsandbytes, the devel and runtime base images, the
CUDA architectures of the target GPUs and the minimum host driver.

Unpinned fields get the newest compatible choice. Combinations that cannot
work are refused (exit 1) with the reason and the nearest alternatives.
With --locked the plan comes from kiln.lock alone, base images pinned by
digest, without any look-up.

The plan says which compatibility data it used and how old its torch and
nvidia/cuda facts are (JSON key data: version, origin, date, age_days,
max_age_days, stale), and warns past --max-data-age days. kiln compat
refresh writes newer data; --compat-data or $KILN_COMPAT_DATA uses it.`,
		Example: `  kiln resolve
  kiln resolve testdata/recipes/torch25-cu124.yaml --json
  kiln resolve kiln.yaml --mirror registry.internal:5000
  kiln resolve --locked --json | jq .base_images
  kiln resolve --compat-data compat.json --json | jq .data`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.File = args[0]
			}
			opts.mirrorSet = cmd.Flags().Changed("mirror")
			return runResolve(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the plan as JSON")
	cmd.Flags().BoolVar(&opts.Locked, "locked", false, "print the plan recorded in kiln.lock (fails when the lock is stale)")
	cmd.Flags().IntVar(&opts.MaxDataAge, "max-data-age", recipes.DefaultMaxDataAgeDays, "warn when the torch and nvidia/cuda facts are older than this many days")
	opts.recipeFlags.register(cmd)
	return cmd
}

func recipeFile(f string) string {
	if f == "" {
		return "kiln.yaml"
	}
	return f
}

func runResolve(ctx context.Context, opts *ResolveOptions) error {
	file := recipeFile(opts.File)
	r, err := recipes.Load(file)
	if err != nil {
		return recipeLoadErr(err)
	}
	var plan *recipes.Plan
	if opts.Locked {
		l, err := recipes.ReadLock(recipes.LockPath(file))
		if err != nil {
			return fmt.Errorf("--locked: %w", err)
		}
		if why := l.Stale(r, nil); len(why) > 0 {
			return fmt.Errorf("--locked: %s is stale: %s; run kiln lock", recipes.LockPath(file), strings.Join(why, "; "))
		}
		plan = l.LockedPlan()
	} else {
		ropts, err := opts.resolveOptions()
		if err != nil {
			return dataErr(opts.IO, opts.JSON, err)
		}
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		if opts.MaxDataAge < 0 {
			return usageErr("--max-data-age: %d: want a number of days (0 for the default %d)", opts.MaxDataAge, recipes.DefaultMaxDataAgeDays)
		}
		plan, err = recipes.Resolve(ctx, r, append(ropts, recipes.WithDataAge(now(), opts.MaxDataAge))...)
		if err != nil {
			return refusal(opts.IO, opts.JSON, err)
		}
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, plan)
	}
	printPlan(opts.IO.Out, plan)
	for _, w := range plan.Warnings {
		fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", w)
	}
	return nil
}

func recipeLoadErr(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%v (write one with: kiln recipes init NAME)", err)
	}
	return err
}

// refusal reports a resolver refusal: as JSON on stdout with --json, and
// as an error otherwise; both exit 1.
func refusal(ios *IO, asJSON bool, err error) error {
	var re *recipes.ResolveError
	if !errors.As(err, &re) {
		return err
	}
	if asJSON {
		_ = writeJSON(ios.Out, map[string]any{"error": re.Error(), "field": re.Field, "reason": re.Reason, "alternatives": nonNil(re.Alternatives)})
		fmt.Fprintf(ios.ErrOut, "kiln: refused: %s\n", re.Error())
		return silentExit(ExitFailure)
	}
	fmt.Fprintf(ios.ErrOut, "kiln: refused: %s: %s\n", re.Field, re.Reason)
	for _, a := range re.Alternatives {
		fmt.Fprintf(ios.ErrOut, "  try: %s\n", a)
	}
	return silentExit(ExitFailure)
}

// dataErr reports a compatibility data file that cannot be used: with
// --json as one object on stdout too, like every failure a machine reads.
func dataErr(ios *IO, asJSON bool, err error) error {
	return dataErrField(ios, asJSON, "compat-data", err)
}

// dataErrField is dataErr for an input named by another flag.
func dataErrField(ios *IO, asJSON bool, field string, err error) error {
	if asJSON {
		_ = writeJSON(ios.Out, map[string]any{"error": err.Error(), "field": field})
	}
	return err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func orDash(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

func printPlan(w io.Writer, p *recipes.Plan) {
	fmt.Fprintf(w, "recipe        %s\n", p.Name)
	fmt.Fprintf(w, "cuda          %s\n", p.CUDA)
	fmt.Fprintf(w, "cudnn         %s (%s)\n", orDash(p.CuDNN), p.CuDNNSource)
	fmt.Fprintf(w, "os            %s\n", p.OS)
	fmt.Fprintf(w, "python        %s\n", p.Python)
	if p.Torch != nil {
		fmt.Fprintf(w, "torch         %s+%s  (index %s, C++11 ABI %v)\n", *p.Torch, *p.TorchCUDAVariant, p.TorchIndexURL, *p.TorchCXX11ABI)
		if p.Torchvision != nil {
			fmt.Fprintf(w, "torchvision   %s\n", *p.Torchvision)
		}
		if p.Torchaudio != nil {
			fmt.Fprintf(w, "torchaudio    %s\n", *p.Torchaudio)
		}
	}
	if p.FlashAttn != nil {
		if p.FlashAttnWheel != nil {
			fmt.Fprintf(w, "flash-attn    %s  wheel %s\n", *p.FlashAttn, *p.FlashAttnWheel)
		} else if b := p.FlashAttnBuild; b != nil {
			fmt.Fprintf(w, "flash-attn    %s  built from source: FLASH_ATTN_CUDA_ARCHS=%s MAX_JOBS=%d (%s)\n", *p.FlashAttn, b.CUDAArchs, b.MaxJobs, b.Reason)
		}
	}
	if p.BitsAndBytes != nil {
		fmt.Fprintf(w, "bitsandbytes  %s  (%s)\n", *p.BitsAndBytes, orDash(p.BitsAndBytesLib))
	}
	fmt.Fprintf(w, "devel image   %s\n", p.BaseImages.Devel)
	fmt.Fprintf(w, "runtime image %s\n", p.BaseImages.Runtime)
	fmt.Fprintf(w, "cuda archs    %s\n", strings.Join(p.CUDAArchs, " "))
	fmt.Fprintf(w, "min driver    %s (toolkit), %s (minor-version compatibility)\n", p.MinDriver.Toolkit, p.MinDriver.MinorVersionCompat)
	fmt.Fprintf(w, "platforms     %s\n", strings.Join(p.Platforms, " "))
	if g := p.GPUCode; g != nil {
		what := "cubins for " + strings.Join(g.Archs, " ")
		if g.KeepPTX {
			what += " + newest PTX"
		}
		scope := "framework and extension libraries"
		if g.NVIDIALibs {
			scope += " and NVIDIA's"
		}
		fmt.Fprintf(w, "gpu code      pruned to %s (%s; gpu_code.prune: false keeps all)\n", what, scope)
	}
	if d := p.Data; d != nil {
		stale := ""
		if d.Stale {
			stale = fmt.Sprintf(", older than %d days: run kiln compat refresh", d.MaxAgeDays)
		}
		fmt.Fprintf(w, "data          %s (%s; torch and nvidia/cuda facts checked %s, %d days ago%s)\n", d.Version, d.Origin, d.Date, d.AgeDays, stale)
	}
}
