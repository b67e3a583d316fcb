package buildcmd

import (
	"fmt"
	"io"
	"strings"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelindex"
)

// wheelCache is the build's wheel cache (--wheel-cache, or the recipe's
// wheel_cache), nil without one. With --locked the lock's keys are used
// as they are.
func wheelCache(opts *BuildOptions) (*builder.WheelCache, error) {
	file := cmdutil.RecipeFile(opts.File)
	r, err := recipes.Load(file)
	if err != nil {
		return nil, cmdutil.RecipeLoadErr(err)
	}
	c, err := opts.WheelCacheFlags.Open(r, layers.WithInsecureRegistries(opts.Insecure...))
	if err != nil || c == nil {
		return nil, err
	}
	wc := &builder.WheelCache{Cache: c, Index: &wheelindex.Client{}, Log: opts.IO.ErrOut}
	if opts.Locked {
		l, err := recipes.ReadLock(recipes.LockPath(file))
		if err != nil {
			return nil, fmt.Errorf("--locked: %w", err)
		}
		for _, w := range l.CompiledWheels {
			wc.Keys = append(wc.Keys, w.Key)
		}
	}
	return wc, nil
}

// writeWheels prints what the wheel cache did, a line per compiled wheel
// (80 columns).
func writeWheels(w io.Writer, uses []builder.WheelUse) {
	for _, u := range uses {
		what := "compiled, not cached"
		switch {
		case u.Cached && u.Wider:
			what = "from the cache (wider archs " + strings.Join(u.Key.Archs, ";") + ")"
		case u.Cached:
			what = "from the cache, " + bytesize.Format(u.Size) + ", not compiled"
		case u.Pushed:
			what = "compiled, pushed, " + bytesize.Format(u.Size)
		}
		fmt.Fprintf(w, "wheel    %s %s: %s\n", u.Package, u.Platform, what)
		if u.Ref != "" {
			fmt.Fprintf(w, "  ref    %s\n", shortRef(u.Ref))
		}
	}
}

// shortRef keeps a wheel's REPO:TAG within 80 columns: the tag's hash is
// cut to 12 hex digits (the key's full digest is in --json).
func shortRef(ref string) string {
	i := strings.LastIndex(ref, "-")
	if i < 0 || len(ref)-i-1 != 64 {
		return ref
	}
	return ref[:i+13] + "…"
}

// wheelUses is uses, or an empty list (JSON [] rather than null).
func wheelUses(uses []builder.WheelUse) []builder.WheelUse {
	if uses == nil {
		return []builder.WheelUse{}
	}
	return uses
}
