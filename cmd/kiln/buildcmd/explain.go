package buildcmd

import (
	"context"
	"fmt"
	"io"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/recipes"
)

// explainer is --explain: the earlier image, read before the build moves
// its tag, and this build's record.
type explainer struct {
	against *builder.Against
	now     *builder.Record
}

// startExplain reads the image --explain compares with: --explain-against,
// else the --push tag's last push.
func startExplain(ctx context.Context, opts *BuildOptions, plan *recipes.Plan, in builder.Inputs) (*explainer, error) {
	if !opts.Explain {
		return nil, nil
	}
	ref := opts.ExplainAgainst
	if ref == "" {
		ref = opts.Push
	}
	now, err := builder.NewRecord(plan, in)
	if err != nil {
		return nil, err
	}
	a, err := builder.ReadAgainst(ctx, ref, opts.registryOptions()...)
	if err != nil {
		return nil, fmt.Errorf("--explain: %w", err)
	}
	return &explainer{against: a, now: now}, nil
}

// finish explains res: per step against the earlier image, and the cost
// of what it pushed.
func (x *explainer) finish(ctx context.Context, opts *BuildOptions, res *builder.Result) (*builder.Explanation, error) {
	if x == nil {
		return nil, nil
	}
	e := x.against.Explain(x.now)
	e.Reused, e.ContentTag = res.Reused, res.ContentTag
	if len(res.Pushed) > 0 && x.against.Digest != "" {
		if err := x.against.Measure(ctx, e, res.Pushed, opts.registryOptions()...); err != nil {
			return nil, fmt.Errorf("--explain: %w", err)
		}
	}
	return e, nil
}

// writeExplain prints e within 80 columns.
func writeExplain(w io.Writer, e *builder.Explanation) {
	const width = termtable.DefaultWidth
	line := func(first, s string) { termtable.Fprintw(w, width, first, "         ", s) }
	against := e.Against
	if e.AgainstDigest != "" {
		against += " (" + termtable.Digest(e.AgainstDigest) + ")"
	}
	line("explain  ", "against "+against)
	if e.Note != "" {
		line("         ", e.Note)
	}
	if e.Reused {
		line("         ", "no-op: answered from the content tag "+e.ContentTag+"; nothing was built (--rebuild builds)")
	}
	hits := 0
	for _, s := range e.Steps {
		if s.Hit {
			hits++
		}
	}
	line("steps    ", fmt.Sprintf("%d of %d hit", hits, len(e.Steps)))
	for _, s := range e.Steps {
		mark := "  hit   "
		if !s.Hit {
			mark = "  miss  "
		}
		line(mark, s.Name)
		if s.Why != "" {
			line("          ", s.Why)
		}
	}
	for _, c := range e.Changes {
		line("changed  ", c.Input+": "+c.What)
	}
	if c := e.Cost; c != nil {
		line("cost     ", fmt.Sprintf("%d of %d layers new: %s to push, %s every host pulls again (%s of layers unchanged)",
			c.NewLayers, c.Layers, bytesize.Format(c.PushBytes), bytesize.Format(c.PullBytes), bytesize.Format(c.SameBytes)))
	}
	if e.AppOnly {
		line("         ", "app-only change: the app layer is content-addressed, so only it is pushed and pulled again; every other layer is the same blob")
	}
}

// explainUsage checks --explain's flags.
func explainUsage(opts *BuildOptions) error {
	if opts.ExplainAgainst != "" && !opts.Explain {
		opts.Explain = true
	}
	if opts.Explain && opts.Push == "" && opts.ExplainAgainst == "" {
		return cmdutil.UsageErr("--explain needs --push (it compares with the tag's last push) or --explain-against REF")
	}
	return nil
}
