package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/warm"
)

// contentTag is the content-addressed tag of a build in the --push repository.
type contentTag struct {
	digest   string   // inputs digest
	ref      name.Tag // REPO:kiln-<digest prefix>
	push     name.Reference
	existing *remote.Descriptor // set when the tag already exists
	ropts    []remote.Option
	// zstd: --compression both, the zstd variant is REF-zstd, its content
	// tag kiln-<digest prefix>-zstd; existing needs both.
	zstd         bool
	zstdExisting *remote.Descriptor
}

// zstdTag is t's zstd variant, TAG-zstd.
func zstdTag(t name.Tag) name.Tag { return t.Context().Tag(t.TagStr() + warm.ZstdTagSuffix) }

func findContentTag(ctx context.Context, opts *BuildOptions, plan *recipes.Plan, in builder.Inputs, dir string, maxLayer int64) (*contentTag, error) {
	lopts := []layers.Option{layers.WithInsecureRegistries(opts.Insecure...)}
	push, err := layers.ParseRef(opts.Push, lopts...)
	if err != nil {
		return nil, usageErr("--push: %v", err)
	}
	d, err := builder.InputsDigest(ctx, plan, builder.DigestInputs{
		Inputs: in, ContextDir: dir, Platforms: plan.Platforms, Compression: opts.Compression, MaxLayerSize: maxLayer, NoProbes: opts.NoTest,
		Resolve: func(ctx context.Context, ref string) (string, error) {
			dg, _, err := layers.PlatformDigests(ctx, ref, lopts...)
			return dg, err
		},
	})
	if err != nil {
		return nil, fmt.Errorf("--skip-existing: %w", err)
	}
	c := &contentTag{digest: d, push: push.Name, ropts: layers.RemoteOptions(ctx, lopts...), zstd: opts.Compression == "both"}
	c.ref = push.Name.Context().Tag(builder.ContentTag(d))
	desc, err := remote.Get(c.ref, c.ropts...)
	if err == nil {
		c.existing = desc
	} else if !isNotFound(err) {
		return nil, fmt.Errorf("--skip-existing: looking up %s: %v", c.ref, err)
	}
	if c.zstd && c.existing != nil {
		zd, err := remote.Get(zstdTag(c.ref), c.ropts...)
		switch {
		case err == nil:
			c.zstdExisting = zd
		case isNotFound(err):
			c.existing = nil // half there: build (it is cached)
		default:
			return nil, fmt.Errorf("--skip-existing: looking up %s: %v", zstdTag(c.ref), err)
		}
	}
	return c, nil
}

// reuseExisting points the --push tag at the image already built from the
// same inputs, without building.
func reuseExisting(ctx context.Context, opts *BuildOptions, c *contentTag) error {
	if t, ok := c.push.(name.Tag); ok && t.String() != c.ref.String() {
		if err := remote.Tag(t, c.existing, c.ropts...); err != nil {
			return fmt.Errorf("tagging %s: %v", t, err)
		}
		if c.zstdExisting != nil {
			if err := remote.Tag(zstdTag(t), c.zstdExisting, c.ropts...); err != nil {
				return fmt.Errorf("tagging %s: %v", zstdTag(t), err)
			}
		}
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, map[string]any{"skipped": true, "digest": c.existing.Digest.String(), "content_tag": c.ref.String(), "push": opts.Push, "inputs_digest": c.digest})
	}
	fmt.Fprintf(opts.IO.Out, "up to date: %s was built from these inputs (%s)\n", c.existing.Digest, c.ref)
	fmt.Fprintf(opts.IO.Out, "pushed   %s\n", opts.Push)
	return nil
}

// tagPushed adds the content tag to what the build just pushed.
func (c *contentTag) tagPushed(ctx context.Context, opts *BuildOptions) error {
	desc, err := remote.Get(c.push, c.ropts...)
	if err != nil {
		return fmt.Errorf("reading back %s: %v", opts.Push, err)
	}
	if err := remote.Tag(c.ref, desc, c.ropts...); err != nil {
		return fmt.Errorf("tagging %s: %v", c.ref, err)
	}
	if t, ok := c.push.(name.Tag); ok && c.zstd {
		zd, err := remote.Get(zstdTag(t), c.ropts...)
		if err != nil {
			return fmt.Errorf("reading back %s: %v", zstdTag(t), err)
		}
		if err := remote.Tag(zstdTag(c.ref), zd, c.ropts...); err != nil {
			return fmt.Errorf("tagging %s: %v", zstdTag(c.ref), err)
		}
	}
	fmt.Fprintf(opts.IO.ErrOut, "kiln: content tag %s\n", c.ref)
	return nil
}

// isNotFound reports a registry's "no such manifest" answer.
func isNotFound(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode == http.StatusNotFound
	}
	return false
}
