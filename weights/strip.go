package weights

import (
	"context"

	"github.com/kiln-build/kiln/layers"
)

// Stripped is a published weights volume and the labels that tie the
// stripped image to it.
type Stripped struct {
	Manifest *Manifest
	// Ref names the artifact by digest (REGISTRY/REPO@sha256:… or
	// oci:DIR@sha256:…).
	Ref string
	// Labels go on the stripped image's config: LabelManifest (Ref),
	// LabelMount and LabelSetDigest.
	Labels map[string]string
}

// Finish publishes what the collector diverted out of an image (Publish),
// names the artifact by digest and returns the labels the stripped image
// carries: the one ending of `kiln weights strip` and `kiln slim
// --weights-to`, so both verbs write the same artifact and labels.
func (c *Collector) Finish(ctx context.Context, to, mount, sourceImageDigest string, opts ...layers.Option) (*Stripped, error) {
	m, dg, err := c.Publish(ctx, to, mount, sourceImageDigest, opts...)
	if err != nil {
		return nil, err
	}
	ref, err := ArtifactRef(to, dg, opts...)
	if err != nil {
		return nil, err
	}
	return &Stripped{Manifest: m, Ref: ref, Labels: map[string]string{LabelManifest: ref, LabelMount: m.Mount, LabelSetDigest: m.SetDigest}}, nil
}
