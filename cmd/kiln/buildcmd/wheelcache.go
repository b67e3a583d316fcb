package buildcmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelindex"
	"github.com/kiln-build/kiln/sign"
)

// wheelCache is the build's wheel cache (--wheel-cache, or the recipe's
// wheel_cache), nil without one. With --locked the lock's keys are used
// as they are, and only the wheels the lock pins; with
// --wheel-cache-verify-key only signed wheels; with --sign-key (k) the
// wheels the build pushes are signed.
func wheelCache(opts *BuildOptions, k *sign.Signer) (*builder.WheelCache, error) {
	file := cmdutil.RecipeFile(opts.File)
	r, err := recipes.Load(file)
	if err != nil {
		return nil, cmdutil.RecipeLoadErr(err)
	}
	c, err := opts.WheelCacheFlags.Open(r, opts.registryOptions()...)
	if err != nil || c == nil {
		return nil, err
	}
	wc := &builder.WheelCache{Cache: c, Index: &wheelindex.Client{}, Log: opts.IO.ErrOut}
	lopts := opts.registryOptions()
	if wc.Verify, err = opts.WheelCacheFlags.Verifier(c, lopts...); err != nil {
		return nil, err
	}
	if k != nil {
		pub := publish.WithSign(publish.Writer(), opts.SignFlag.Signer(k, lopts))
		wc.Sign = func(ctx context.Context, e *wheelcache.Entry) error {
			d, err := v1.NewHash(e.Manifest)
			if err != nil {
				return err
			}
			_, err = pub.Publish(ctx, publish.Pushed(d), e.Ref)
			return err
		}
	}
	if opts.Locked {
		l, err := recipes.ReadLock(recipes.LockPath(file))
		if err != nil {
			return nil, fmt.Errorf("--locked: %w", err)
		}
		wc.Locked, wc.Pinned = true, map[string]string{}
		for _, w := range l.CompiledWheels {
			wc.Keys = append(wc.Keys, w.Key)
			if w.Cached && w.SHA256 != "" {
				wc.Pinned[w.Key.Digest()] = w.SHA256
			}
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

// shortRef keeps a wheel's REPO:TAG within 80 columns after its
// 9-column label: the tag's hash is cut to 12 hex digits (the key's full
// digest is in --json), then the repository's middle path elided.
func shortRef(ref string) string {
	const width = 71
	if i := strings.LastIndex(ref, "-"); i >= 0 && len(ref)-i-1 == 64 {
		ref = ref[:i+13] + "…"
	}
	if utf8.RuneCountInString(ref) <= width {
		return ref
	}
	host, rest, _ := strings.Cut(ref, "/")
	if j := strings.LastIndex(rest, "/"); j >= 0 {
		ref = host + "/…" + rest[j:]
	}
	return ref
}

// wheelUses is uses, or an empty list (JSON [] rather than null).
func wheelUses(uses []builder.WheelUse) []builder.WheelUse {
	if uses == nil {
		return []builder.WheelUse{}
	}
	return uses
}

// warnWheels says which compiled wheels did not reach the cache, and why.
func warnWheels(w io.Writer, uses []builder.WheelUse) {
	for _, u := range uses {
		if !u.Cached && !u.Pushed && u.Note != "" {
			fmt.Fprintf(w, "warning: %s %s: %s\n", u.Package, u.Platform, u.Note)
		}
	}
}
