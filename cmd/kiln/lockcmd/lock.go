package lockcmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelindex"
	"github.com/kiln-build/kiln/registry"
)

// LockOptions are kiln lock's inputs.
type LockOptions struct {
	IO               *cmdutil.IO
	File             string
	Output           string
	Check            bool
	InsecureRegistry []string
	verbkit.RecipeFlags
	verbkit.WheelCacheFlags
	// Test seams: nil means the real registry and HTTP clients.
	Digests recipes.DigestResolver
	HTTP    *http.Client
}

// NewCmdLock is kiln lock [FILE].
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdLock(f *verbkit.Factory, runF func(*LockOptions) error) *cobra.Command {
	ios := f.IO
	opts := &LockOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "lock [FILE]",
		Short: "Pin a recipe: base image digests per platform and wheel hashes (kiln.lock)",
		Long: `Resolves the recipe (default ./kiln.yaml), looks up the devel and runtime base
images in their registry (or the registry mirror) and records the digest of
each platform's manifest, finds every pinned wheel on its PEP 503/691 index
(torch, torchvision, torchaudio, bitsandbytes, flash-attn, pip extras pinned
with ==) and records its URL and sha256, and writes kiln.lock next to the
recipe (atomically), with a hash of the recipe.

--check exits 1 when kiln.lock is stale (the recipe or the resolved plan
changed) without any network look-up. Builds given --locked use the lock
alone.`,
		Example: `  kiln lock
  kiln lock recipes/serve.yaml --mirror 127.0.0.1:5000 --wheel-index http://127.0.0.1:8080/simple
  kiln lock --check`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.File = args[0]
			}
			opts.RecipeFlags.Changed(cmd)
			return cmdutil.Run(cmd.Context(), opts, runF, runLock)
		},
	}
	cmd.Flags().BoolVar(&opts.Check, "check", false, "exit 1 when kiln.lock is stale; write nothing")
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "", "lock file to write or check (default: kiln.lock next to the recipe)")
	cmd.Flags().StringSliceVar(&opts.InsecureRegistry, "insecure-registry", nil, "registry host that speaks plain HTTP (repeatable; loopback hosts always may)")
	opts.RecipeFlags.Register(cmd)
	opts.WheelCacheFlags.Register(cmd)
	return cmd
}

func runLock(ctx context.Context, opts *LockOptions) error {
	file := verbkit.RecipeFile(opts.File)
	r, err := recipes.Load(file)
	if err != nil {
		return verbkit.RecipeLoadErr(err)
	}
	out := opts.Output
	if out == "" {
		out = recipes.LockPath(file)
	}
	ropts, err := opts.ResolverOptions()
	if err != nil {
		return err
	}
	var l *recipes.Lock
	if opts.Check {
		// Read the lock first: with none there is nothing to resolve for.
		l, err = recipes.ReadLock(out)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no lock file %s to check; write one with: kiln lock %s", out, file)
		}
		if err != nil {
			return fmt.Errorf("%s cannot be read (%v); write it again with: kiln lock %s", out, err, file)
		}
	}
	plan, err := recipes.Resolve(ctx, r, ropts...)
	if err != nil {
		return verbkit.Refusal(opts.IO, false, err)
	}
	if opts.Check {
		if why := l.Stale(r, plan); len(why) > 0 {
			cmdutil.Notef(opts.IO.ErrOut, "%s is stale:", out)
			for _, w := range why {
				fmt.Fprintf(opts.IO.ErrOut, "  - %s\n", w)
			}
			fmt.Fprintf(opts.IO.ErrOut, "run: kiln lock %s\n", file)
			return cmdutil.SilentExit(cmdutil.ExitFailure)
		}
		fmt.Fprintf(opts.IO.Out, "%s is up to date\n", out)
		return nil
	}
	digests := opts.Digests
	if digests == nil {
		mirrors, err := opts.RecipeFlags.MirrorOptions(opts.IO)
		if err != nil {
			return err
		}
		ropts := append([]registry.Option{registry.WithInsecureRegistries(opts.InsecureRegistry...)}, mirrors...)
		digests = recipes.DigestResolverFunc(func(ctx context.Context, ref string) (string, map[string]string, error) {
			return layers.PlatformDigests(ctx, ref, ropts...)
		})
	}
	hc := opts.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	idx := &wheelindex.Client{HTTP: hc, Setting: recipes.WheelIndexSetting}
	l, err = recipes.NewLock(ctx, r, plan, recipes.LockOptions{Digests: digests, Index: idx, HTTP: hc})
	if err != nil {
		return err
	}
	if err := lockCompiledWheels(ctx, opts, r, plan, l, idx); err != nil {
		return err
	}
	if err := recipes.WriteLock(out, l); err != nil {
		return err
	}
	for _, w := range append(plan.Warnings, l.Warnings...) {
		cmdutil.Warn(opts.IO, w)
	}
	fmt.Fprintf(opts.IO.Out, "wrote %s: %d base image digests, %d wheels (recipe %s)\n", out, countDigests(l), len(l.Wheels), strings.TrimPrefix(l.RecipeHash, "sha256:")[:12])
	for _, w := range l.CompiledWheels {
		state := "compiled at build (no wheel cache)"
		switch {
		case w.Cached && w.Wider:
			state = "in the wheel cache (wider archs " + strings.Join(w.Key.Archs, ";") + ")"
		case w.Cached:
			state = "in the wheel cache"
		case w.Cache != "":
			state = "not in the wheel cache yet: compiled at build"
		}
		fmt.Fprintf(opts.IO.Out, "  %s %s %s: %s\n", w.Name, w.Version, w.Platform, state)
	}
	return nil
}

// lockCompiledWheels records the wheels the plan compiles with their
// wheel cache keys, and with a wheel cache (--wheel-cache or the recipe's
// wheel_cache) whether it holds each one. A key that cannot be made (an
// index without the source's sha256) is a warning: the build compiles.
func lockCompiledWheels(ctx context.Context, opts *LockOptions, r *recipes.Recipe, plan *recipes.Plan, l *recipes.Lock, idx *wheelindex.Client) error {
	if len(plan.Compiled()) == 0 {
		return nil
	}
	lopts := []registry.Option{registry.WithInsecureRegistries(opts.InsecureRegistry...)}
	c, err := opts.WheelCacheFlags.Open(r, lopts...)
	if err != nil {
		return err
	}
	// --wheel-cache-verify-key: the lock pins only signed wheels.
	verify, err := opts.WheelCacheFlags.Verifier(c, lopts...)
	if err != nil {
		return err
	}
	if c != nil {
		// The lock only looks: a pull-only credential is enough.
		c = c.ReadOnly()
	}
	keys, err := builder.WheelKeys(ctx, plan, nil, idx)
	if err != nil {
		l.Warnings = append(l.Warnings, fmt.Sprintf("compiled wheels have no wheel cache key: %v", err))
		return nil
	}
	for _, k := range keys {
		w := recipes.LockedCompiledWheel{Name: k.Package, Version: k.Version, Platform: k.Platform, Key: k, KeyDigest: k.Digest()}
		if c != nil {
			w.Cache = c.Repo()
			e, err := c.Lookup(ctx, k)
			if err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			if e != nil && verify != nil {
				if err := verify(ctx, e); err != nil {
					l.Warnings = append(l.Warnings, fmt.Sprintf("%s %s (%s): the cached wheel is not pinned: %v", k.Package, k.Version, k.Platform, err))
					e = nil
				}
			}
			if e != nil {
				w.Cached, w.Wider, w.Ref, w.Filename, w.SHA256, w.Size = true, e.Wider, e.Ref.String(), e.Filename, e.Digest.Hex, e.Size
			}
		}
		l.CompiledWheels = append(l.CompiledWheels, w)
	}
	return nil
}

func countDigests(l *recipes.Lock) int {
	n := 0
	for _, li := range l.BaseImages {
		n += len(li.Platforms)
	}
	return n
}
