package verbkit

import (
	"cmp"
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sign"
)

// WheelCacheFlags are kiln build's and kiln lock's wheel cache flags,
// over the recipe's wheel_cache.
type WheelCacheFlags struct {
	WheelCache       string
	WheelCacheMirror string
	AllowWiderArchs  bool
	// VerifyKey is --wheel-cache-verify-key: a public key or a verify
	// policy (kiln warm --verify-key's format) a cached wheel's artifact
	// must be signed under.
	VerifyKey string
}

// Register adds --wheel-cache, --wheel-cache-mirror and
// --allow-wider-archs to cmd.
func (f *WheelCacheFlags) Register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.WheelCache, "wheel-cache", "", "registry repository that keeps the wheels kiln compiles (FlashAttention build: source), keyed by what determines their bytes: a hit is fetched and verified instead of compiled (overrides wheel_cache.repo)")
	fl.StringVar(&f.WheelCacheMirror, "wheel-cache-mirror", "", "host[:port] serving the wheel cache's repository, read before it (overrides wheel_cache.mirror)")
	fl.StringVar(&f.VerifyKey, "wheel-cache-verify-key", "", "public key or verify policy (as kiln warm --verify-key) a cached wheel must be signed under (kiln build --sign-key signs the wheels it pushes); an unsigned one is compiled instead")
	fl.BoolVar(&f.AllowWiderArchs, "allow-wider-archs", false, "use a cached wheel compiled for more GPU architectures than the recipe's when there is none for exactly them (correct, but larger; wheel_cache.allow_wider_archs)")
}

// Open opens the cache the flags and r's wheel_cache name; nil when
// neither names a repository.
func (f *WheelCacheFlags) Open(r *recipes.Recipe, lopts ...registry.Option) (*wheelcache.Cache, error) {
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
		return nil, cmdutil.UsageErr("--wheel-cache: %v", err)
	}
	return c, nil
}

// Verifier is the check --wheel-cache-verify-key asks of a cached wheel
// found in c: its artifact manifest signed under the key or policy (the
// policy's scope is c's own repository, the signature read where the
// wheel was, the mirror's too); nil without the flag.
func (f *WheelCacheFlags) Verifier(c *wheelcache.Cache, lopts ...registry.Option) (func(context.Context, *wheelcache.Entry) error, error) {
	if f.VerifyKey == "" || c == nil {
		return nil, nil
	}
	pol, err := sign.LoadPolicy(f.VerifyKey)
	if err != nil {
		return nil, cmdutil.UsageErr("--wheel-cache-verify-key %v", err)
	}
	origin, err := name.NewRepository(c.Repo(), name.Insecure)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, e *wheelcache.Entry) error {
		d, err := v1.NewHash(e.Manifest)
		if err != nil {
			return err
		}
		res, err := pol.VerifyDigest(ctx, e.Ref.String(), origin, e.ReadRepo(), d, lopts...)
		if err != nil {
			return fmt.Errorf("--wheel-cache-verify-key: %v", err)
		}
		if !res.Verified {
			return fmt.Errorf("--wheel-cache-verify-key: %v", &sign.Error{Result: res})
		}
		return nil
	}, nil
}
