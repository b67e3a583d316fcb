package buildcmd

import (
	"context"
	"fmt"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

// findContentTag looks up the --push repository's content tag of this
// build (builder.FindContent).
func findContentTag(ctx context.Context, opts *BuildOptions, plan *recipes.Plan, in builder.Inputs, dir string, maxLayer int64) (*builder.Content, error) {
	lopts := []layers.Option{layers.WithInsecureRegistries(opts.Insecure...)}
	if _, err := layers.ParseRef(opts.Push, lopts...); err != nil {
		return nil, cmdutil.UsageErr("--push: %v", err)
	}
	c, err := builder.FindContent(ctx, plan, builder.DigestInputs{
		Inputs: in, ContextDir: dir, Platforms: opts.Platforms, Compression: opts.Compression, MaxLayerSize: maxLayer, NoProbes: opts.NoTest,
	}, opts.Push, opts.Compression == "both", lopts...)
	if err != nil {
		return nil, fmt.Errorf("--skip-existing: %w", err)
	}
	return c, nil
}

// reuseExisting points the --push tag at the image already built from the
// same inputs, without building.
func reuseExisting(ctx context.Context, opts *BuildOptions, c *builder.Content) error {
	if err := c.Reuse(ctx); err != nil {
		return err
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, map[string]any{"skipped": true, "digest": c.Existing.Digest.String(), "content_tag": c.Tag.String(), "push": opts.Push, "inputs_digest": c.Digest})
	}
	fmt.Fprintf(opts.IO.Out, "up to date: %s was built from these inputs (%s)\n", c.Existing.Digest, c.Tag)
	fmt.Fprintf(opts.IO.Out, "pushed   %s\n", opts.Push)
	return nil
}
