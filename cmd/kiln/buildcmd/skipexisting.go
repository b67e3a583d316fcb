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
	lopts := opts.registryOptions()
	if _, err := layers.ParseRef(opts.Push, lopts...); err != nil {
		return nil, cmdutil.UsageErr("--push: %v", err)
	}
	c, err := builder.FindContent(ctx, plan, builder.DigestInputs{
		Inputs: in, ContextDir: dir, Platforms: opts.Platforms, Compression: opts.Compression, MaxLayerSize: maxLayer, NoProbes: opts.NoTest,
	}, opts.Push, opts.Compression == "both", lopts...)
	if err != nil {
		return nil, fmt.Errorf("content tag: %w", err)
	}
	return c, nil
}

// answerExisting looks up the --push repository's content tag of this
// build (unless --rebuild). When it holds images built from the same
// inputs, and checked to be (their kiln labels carry this recipe's hash
// and lock digest), the --push tags are pointed at them and their result
// is the build's: a no-op rebuild solves nothing. A build that also
// writes --to outputs is built (its files come from the solve), and a
// failed lookup is said and the build goes on. content is nil without
// --push or with --rebuild; else the build adds the content tag to what
// it pushes.
func answerExisting(ctx context.Context, opts *BuildOptions, fl *buildFlags, plan *recipes.Plan, in builder.Inputs, dir string) (content *builder.Content, reused *builder.Result, err error) {
	if opts.Push == "" || opts.Rebuild {
		return nil, nil, nil
	}
	content, err = findContentTag(ctx, opts, plan, in, dir, fl.maxLayer)
	if err != nil {
		fmt.Fprintf(opts.IO.ErrOut, "kiln: building: the content tag could not be looked up (%v)\n", err)
		return nil, nil, nil
	}
	if content.Existing == nil {
		return content, nil, nil
	}
	for _, o := range fl.outputs {
		if !o.Pushes() {
			fmt.Fprintf(opts.IO.ErrOut, "kiln: building: %s holds these inputs' image, but --to %s is written by the build\n", content.Tag, o)
			return content, nil, nil
		}
	}
	if err := content.Verify(ctx, in); err != nil {
		fmt.Fprintf(opts.IO.ErrOut, "kiln: building: not reusing %v\n", err)
		return content, nil, nil
	}
	if err := content.Reuse(ctx); err != nil {
		return nil, nil, err
	}
	return content, content.Reused(fl.comp), nil
}
