package buildcmd

import (
	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelindex"
)

// wheelCache is the build's wheel cache (--wheel-cache, or the recipe's
// wheel_cache), nil without one. With --locked (lock) the lock's keys
// are used as they are, and only the wheels the lock pins; with
// --wheel-cache-verify-key only signed wheels. builder.Run signs the
// wheels the build pushes with --sign-key.
func wheelCache(opts *BuildOptions, lock *recipes.Lock) (*builder.WheelCache, error) {
	r, err := recipes.Load(verbkit.RecipeFile(opts.File))
	if err != nil {
		return nil, verbkit.RecipeLoadErr(err)
	}
	c, err := opts.WheelCacheFlags.Open(r, opts.registryOptions()...)
	if err != nil || c == nil {
		return nil, err
	}
	wc := &builder.WheelCache{Cache: c, Index: &wheelindex.Client{}, Log: opts.IO.ErrOut}
	if wc.Verify, err = opts.WheelCacheFlags.Verifier(c, opts.registryOptions()...); err != nil {
		return nil, err
	}
	if lock != nil {
		wc.PinLock(lock)
	}
	return wc, nil
}
