package builder

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// Explanation is kiln build --explain's answer: per step, hit or miss
// against an earlier image and why; the inputs that changed; and what
// the build costs against that image.
type Explanation struct {
	Against       string `json:"against"`
	AgainstDigest string `json:"against_digest,omitempty"`
	// Note says why there is nothing to compare with (no image at
	// Against, or one without kiln's record); Steps are then all misses.
	Note string `json:"note,omitempty"`
	// Reused says a no-op rebuild answered from the content tag.
	Reused     bool          `json:"reused"`
	ContentTag string        `json:"content_tag,omitempty"`
	Steps      []StepExplain `json:"steps"`
	Changes    []Change      `json:"changes"`
	// AppOnly says the app files are the only input that changed: their
	// layer is content-addressed, so only it is pushed and pulled again.
	AppOnly bool  `json:"app_only"`
	Cost    *Cost `json:"cost,omitempty"`
}

// Cost is what the built image costs against the earlier one: layers are
// content-addressed, so a layer whose digest the earlier image has is
// neither pushed nor pulled again.
type Cost struct {
	Layers    int `json:"layers"`     // the image's (the --push tag's)
	NewLayers int `json:"new_layers"` // of those, not in the earlier image
	// PushBytes are the new layers of every pushed variant (gzip and
	// zstd), each against the earlier image's same variant.
	PushBytes int64 `json:"push_bytes"`
	// PullBytes are what every host holding the earlier image pulls
	// again: the --push tag's new layers.
	PullBytes int64 `json:"pull_bytes"`
	// SameBytes are the --push tag's layers the earlier image has.
	SameBytes int64 `json:"same_bytes"`
}

// Against is the earlier image a build is explained against, read before
// the build moves its tag: its record and its layers (and its zstd
// variant's, REF-zstd).
type Against struct {
	Ref        string
	Digest     string
	Record     *Record
	Layers     []v1.Descriptor
	ZstdLayers []v1.Descriptor
	repo       name.Repository
	client     *registry.Client // repo's: one login for every read there
	platform   v1.Platform
}

// ReadAgainst reads the image r names (a registry reference, parsed once
// by the caller; of an index, the image for the platform lopts select:
// kiln build passes the platform it builds first): its kiln record and
// layers. An image that is not there is not an error:
// Digest is then "".
func ReadAgainst(ctx context.Context, r layers.Ref, lopts ...registry.Option) (*Against, error) {
	if r.Kind != layers.KindRegistry || r.Name == nil {
		return nil, fmt.Errorf("--explain-against %s: want a registry reference", r)
	}
	// One client reads the image, its zstd variant and, after the build,
	// what it pushed (Measure): one login.
	c, err := registry.ClientFor(ctx, r.Name.Context(), lopts...)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %v", r.Name, registry.RedactError(err))
	}
	a := &Against{Ref: r.String(), repo: r.Name.Context(), client: c, platform: registry.MakeOptions(lopts).Platform}
	dg, ls, cf, err := a.image(ctx, c, r.Name)
	if err != nil || dg == "" {
		return a, err
	}
	a.Digest, a.Layers = dg, ls
	if v, ok := cf.Config.Labels[layers.LabelInputs]; ok {
		if a.Record, err = ParseRecord(v); err != nil {
			return nil, err
		}
	}
	if t, ok := r.Name.(name.Tag); ok {
		if _, zl, _, err := a.image(ctx, c, layers.ZstdTag(t)); err == nil {
			a.ZstdLayers = zl
		}
	}
	return a, nil
}

// image reads the image ref names, through c, for the build's platform
// (an index's manifest for it, as a pull would install): its root digest,
// layers and config, each verified against its descriptor and bounded in
// size (layers.Walk); digest "" when the registry has no such manifest.
func (a *Against) image(ctx context.Context, c *registry.Client, ref name.Reference) (string, []v1.Descriptor, *v1.ConfigFile, error) {
	raw, desc, err := c.Manifest(ctx, ref)
	if registry.IsNotFound(err) {
		return "", nil, nil, nil
	}
	if err != nil {
		return "", nil, nil, fmt.Errorf("reading %s: %v", ref, registry.RedactError(err))
	}
	rt, err := layers.Walk(ctx, layers.Ref{Raw: ref.String()}, c, layers.Raw{Desc: desc, Bytes: raw}, a.platform, nil)
	if err != nil {
		return "", nil, nil, err
	}
	return desc.Digest.String(), rt.Layers, rt.ConfigFile, nil
}

// Explain compares the build's record (now) with the earlier image's.
func (a *Against) Explain(now *Record) *Explanation {
	e := &Explanation{Against: a.Ref, AgainstDigest: a.Digest}
	was := a.Record
	switch {
	case a.Digest == "":
		e.Note = "no image at " + a.Ref + " yet: a first build misses every step"
	case was == nil:
		e.Note = a.Ref + " has no kiln record (" + layers.LabelInputs + "): built by another tool or an older kiln"
	}
	if was == nil {
		// Nothing to compare with: every step misses, and the note says
		// why; no input "changed".
		e.Changes = []Change{}
		for _, s := range now.Steps {
			e.Steps = append(e.Steps, StepExplain{Name: s.Name})
		}
		return e
	}
	e.Steps, e.Changes = Explain(was, now)
	e.Changes = nonNil(e.Changes)
	e.AppOnly = a.Record != nil && len(e.Changes) == 1 && e.Changes[0].Input == "app"
	return e
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Measure sets the cost of what the build pushed (res.Pushed, the --push
// tag first) against the earlier image's layers.
func (a *Against) Measure(ctx context.Context, e *Explanation, pushed []Pushed, lopts ...registry.Option) error {
	for i, p := range pushed {
		r := p.Ref
		dg, err := v1.NewHash(p.Digest)
		if err != nil {
			return err
		}
		c := a.client
		if r.Name.Context().Name() != a.repo.Name() {
			if c, err = registry.ClientFor(ctx, r.Name.Context(), lopts...); err != nil {
				return fmt.Errorf("reading %s: %v", r.Name, registry.RedactError(err))
			}
		}
		_, ls, _, err := a.image(ctx, c, r.Name.Context().Digest(dg.String()))
		if err != nil {
			return err
		}
		was := a.Layers
		if p.Compression == "zstd" && i > 0 {
			was = a.ZstdLayers
		}
		have := map[v1.Hash]bool{}
		for _, l := range was {
			have[l.Digest] = true
		}
		if e.Cost == nil {
			e.Cost = &Cost{}
		}
		for _, l := range ls {
			if have[l.Digest] {
				if i == 0 {
					e.Cost.SameBytes += l.Size
				}
				continue
			}
			e.Cost.PushBytes += l.Size
			if i == 0 {
				e.Cost.NewLayers++
				e.Cost.PullBytes += l.Size
			}
		}
		if i == 0 {
			e.Cost.Layers = len(ls)
		}
	}
	return nil
}
