package cmdutil

import (
	"cmp"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

// WheelCacheFlags are kiln build's and kiln lock's wheel cache flags,
// over the recipe's wheel_cache.
type WheelCacheFlags struct {
	WheelCache       string
	WheelCacheMirror string
	AllowWiderArchs  bool
}

// Register adds --wheel-cache, --wheel-cache-mirror and
// --allow-wider-archs to cmd.
func (f *WheelCacheFlags) Register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.WheelCache, "wheel-cache", "", "registry repository that keeps the wheels kiln compiles (FlashAttention build: source), keyed by what determines their bytes: a hit is fetched and verified instead of compiled (overrides wheel_cache.repo)")
	fl.StringVar(&f.WheelCacheMirror, "wheel-cache-mirror", "", "host[:port] serving the wheel cache's repository, read before it (overrides wheel_cache.mirror)")
	fl.BoolVar(&f.AllowWiderArchs, "allow-wider-archs", false, "use a cached wheel compiled for more GPU architectures than the recipe's when there is none for exactly them (correct, but larger; wheel_cache.allow_wider_archs)")
}

// Open opens the cache the flags and r's wheel_cache name; nil when
// neither names a repository.
func (f *WheelCacheFlags) Open(r *recipes.Recipe, lopts ...layers.Option) (*wheelcache.Cache, error) {
	spec := recipes.WheelCacheSpec{}
	if r != nil && r.WheelCache != nil {
		spec = *r.WheelCache
	}
	repo := cmp.Or(f.WheelCache, spec.Repo)
	if repo == "" {
		return nil, nil
	}
	c, err := wheelcache.Open(repo,
		wheelcache.WithMirror(cmp.Or(f.WheelCacheMirror, spec.Mirror)),
		wheelcache.WithAllowWiderArchs(f.AllowWiderArchs || spec.AllowWiderArchs),
		wheelcache.WithRegistryOptions(lopts...))
	if err != nil {
		return nil, UsageErr("--wheel-cache: %v", err)
	}
	return c, nil
}
