package resolvecmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/recipes"
)

// ResolveOptions are kiln resolve's inputs.
type ResolveOptions struct {
	IO     *cmdutil.IO
	File   string
	JSON   bool
	Locked bool
	// MaxDataAge is how many days old the torch and nvidia/cuda facts may
	// be before the plan warns (0: recipes.DefaultMaxDataAgeDays).
	MaxDataAge int
	verbkit.RecipeFlags
	// Now is the clock the data's age is measured with (nil: time.Now).
	Now func() time.Time
}

// NewCmdResolve is kiln resolve [FILE].
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdResolve(f *verbkit.Factory, runF func(*ResolveOptions) error) *cobra.Command {
	ios := f.IO
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
			opts.RecipeFlags.Changed(cmd)
			return cmdutil.Run(cmd.Context(), opts, runF, runResolve)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the plan as JSON")
	cmdutil.SetSchema(cmd, "kiln.resolve/v1")
	cmd.Flags().BoolVar(&opts.Locked, "locked", false, "print the plan recorded in kiln.lock (fails when the lock is stale)")
	cmd.Flags().IntVar(&opts.MaxDataAge, "max-data-age", recipes.DefaultMaxDataAgeDays, "warn when the torch and nvidia/cuda facts are older than this many days")
	opts.RecipeFlags.Register(cmd)
	return cmd
}

func runResolve(ctx context.Context, opts *ResolveOptions) error {
	file := verbkit.RecipeFile(opts.File)
	r, err := recipes.Load(file)
	if err != nil {
		return verbkit.RecipeLoadErr(err)
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
		ropts, err := opts.ResolverOptions()
		if err != nil {
			return verbkit.DataErr(opts.IO, opts.JSON, err)
		}
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		if opts.MaxDataAge < 0 {
			return cmdutil.UsageErr("--max-data-age: %d: want a number of days (0 for the default %d)", opts.MaxDataAge, recipes.DefaultMaxDataAgeDays)
		}
		plan, err = recipes.Resolve(ctx, r, append(ropts, recipes.WithDataAge(now(), opts.MaxDataAge))...)
		if err != nil {
			return verbkit.Refusal(opts.IO, opts.JSON, err)
		}
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, plan)
	}
	var b strings.Builder
	plan.WriteTable(&b)
	termtable.Labeled(opts.IO.Out, cmdutil.TermWidth(opts.IO.Out), 14, b.String())
	for _, w := range plan.Warnings {
		cmdutil.Warn(opts.IO, w)
	}
	return nil
}
