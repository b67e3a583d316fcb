package builder

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/kiln-build/kiln/recipes"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/exporter/containerimage/exptypes"
	gateway "github.com/moby/buildkit/frontend/gateway/client"
)

// gatewayBuild is the build's gateway function: per platform, the split
// of large installs, the runtime base's config, the image config, the
// solve of the runtime stage, the recipe's tests, and the attestations;
// the exporters get one result with every platform's reference.
type gatewayBuild struct {
	plan   *recipes.Plan
	in     Inputs
	o      Options
	graphs []*Graph
	// configs are the image configs by platform, set by run.
	configs map[string][]byte
	// wheels pushes what the build compiled to the wheel cache (nil:
	// none).
	wheels *wheelRun
}

func (b *gatewayBuild) run(ctx context.Context, c gateway.Client) (*gateway.Result, error) {
	out := gateway.NewResult()
	var eps exptypes.Platforms
	atts, err := attestationRefs(ctx, c, b.o.Attestations)
	if err != nil {
		return nil, err
	}
	for _, g := range b.graphs {
		if b.o.MaxLayerSize > 0 {
			if g, err = splitGraph(ctx, c, b.plan, b.in, g, b.o.MaxLayerSize); err != nil {
				return nil, err
			}
		}
		id := PlatformString(g.Platform)
		ref, cfgJSON, base, err := b.solve(ctx, c, g)
		if err != nil {
			return nil, err
		}
		b.configs[id] = cfgJSON
		if len(b.graphs) == 1 {
			out.SetRef(ref)
			out.AddMeta(exptypes.ExporterImageConfigKey, cfgJSON)
			// The base's history entries then keep their times (the
			// exporter dates only kiln's to the epoch).
			out.AddMeta(exptypes.ExporterImageBaseConfigKey, base)
		} else {
			out.AddRef(id, ref)
			out.AddMeta(exptypes.ExporterImageConfigKey+"/"+id, cfgJSON)
			out.AddMeta(exptypes.ExporterImageBaseConfigKey+"/"+id, base)
		}
		for _, a := range atts {
			out.AddAttestation(id, a)
		}
		if err := b.attest(ctx, c, id, ref, out); err != nil {
			return nil, err
		}
		eps.Platforms = append(eps.Platforms, exptypes.Platform{ID: id, Platform: g.Platform})
	}
	if len(b.graphs) > 1 {
		dt, err := json.Marshal(eps)
		if err != nil {
			return nil, err
		}
		out.AddMeta(exptypes.ExporterPlatformsKey, dt)
	}
	return out, nil
}

// solve builds one platform's runtime image and runs the recipe's tests
// on it; it returns the image, its config and the runtime base's config.
func (b *gatewayBuild) solve(ctx context.Context, c gateway.Client, g *Graph) (gateway.Reference, []byte, []byte, error) {
	pl := g.Platform
	_, _, base, err := c.ResolveImageConfig(ctx, g.Layout.Runtime.Base, sourceresolver.Opt{
		LogName:  "resolve runtime base " + g.Layout.Runtime.Base,
		ImageOpt: &sourceresolver.ResolveImageOpt{Platform: &pl, ResolveMode: "default"},
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("runtime base %s: %w", g.Layout.Runtime.Base, err)
	}
	cfg, err := ImageConfig(b.plan, b.in, pl, base)
	if err != nil {
		return nil, nil, nil, err
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	def, err := g.Marshal(ctx, g.Runtime)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := c.Solve(ctx, gateway.SolveRequest{Definition: def.ToPB(), Evaluate: true})
	if err != nil {
		return nil, nil, nil, err
	}
	ref, err := r.SingleRef()
	if err != nil {
		return nil, nil, nil, err
	}
	// Before the tests: a compile that took hours is kept even when a
	// test then fails.
	if err := b.wheels.pushCompiled(ctx, c, g); err != nil {
		return nil, nil, nil, err
	}
	if g.HasProbe && !b.o.NoProbes {
		pdef, err := g.Marshal(ctx, g.Probe)
		if err != nil {
			return nil, nil, nil, err
		}
		if _, err := c.Solve(ctx, gateway.SolveRequest{Definition: pdef.ToPB(), Evaluate: true}); err != nil {
			return nil, nil, nil, fmt.Errorf("recipe test failed in the runtime image: %w", err)
		}
	}
	return ref, cfgJSON, base, nil
}

// attest adds the attestations Options.Attest computes from the built
// image (the SBOM from its files).
func (b *gatewayBuild) attest(ctx context.Context, c gateway.Client, id string, ref gateway.Reference, out *gateway.Result) error {
	if b.o.Attest == nil {
		return nil
	}
	as, err := b.o.Attest(ctx, id, refFiles{ref})
	if err != nil {
		return fmt.Errorf("attestations for %s: %w", id, err)
	}
	gas, err := attestationRefs(ctx, c, as)
	if err != nil {
		return err
	}
	for _, a := range gas {
		out.AddAttestation(id, a)
	}
	return nil
}
