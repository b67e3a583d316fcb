// Package strip is the producer side of weights volumes: the ending of
// `kiln weights strip` and `kiln slim --weights-to` (the artifact
// published, its image twin, the stripped image labelled, the SBOM, the
// signatures). The consumer side (pull, verify, the volume layout) is
// package weights, which kiln warm reads without publish, sbom or sign.
package strip

import (
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/weights"
)

// Stripped is a published weights volume and the labels that tie the
// stripped image to it.
type Stripped struct {
	Manifest *weights.Manifest
	// Ref names the artifact by digest (REGISTRY/REPO@sha256:… or
	// oci:DIR@sha256:…), Digest its manifest's digest.
	Ref    layers.Ref
	Digest v1.Hash
	// Labels go on the stripped image's config: layers.LabelWeightsManifest (Ref),
	// layers.LabelWeightsMount and layers.LabelWeightsSetDigest.
	Labels map[string]string
}

// Finish publishes what the collector c diverted out of an image
// (Collector.Publish), names the artifact by digest and returns the labels
// the stripped image carries: the one ending of `kiln weights strip` and
// `kiln slim --weights-to`, so both verbs write the same artifact and
// labels.
func Finish(ctx context.Context, c *weights.Collector, to layers.Ref, mount, sourceImageDigest string, opts ...registry.Option) (*Stripped, error) {
	m, dg, err := c.Publish(ctx, to, mount, sourceImageDigest, opts...)
	if err != nil {
		return nil, err
	}
	ref, err := weights.ArtifactRef(to, dg)
	if err != nil {
		return nil, err
	}
	return &Stripped{Manifest: m, Ref: ref, Digest: dg, Labels: map[string]string{layers.LabelWeightsManifest: ref.String(), layers.LabelWeightsMount: m.Mount, layers.LabelWeightsSetDigest: m.SetDigest}}, nil
}

// Rewritten is an image rewritten without its weights whose config
// takes labels at the end (slim.Result).
type Rewritten interface {
	Image(labels map[string]string) (v1.Image, error)
}

// Options say where Run publishes a stripped image and its
// weights, and what it attaches.
type Options struct {
	// To is where the image without weights goes; WeightsTo the weights
	// artifact (REF or oci:DIR[:TAG]); Mount the volume's mount path ("":
	// the deepest directory holding every weight file).
	To, WeightsTo layers.Ref
	Mount         string
	// ImageTwin, when set, is where the volume is also published as an
	// image (Collector.Twin) that the stripped image names
	// (weights.LabelTwin).
	ImageTwin layers.Ref
	// Source is the stripped image: its digest is recorded in the volume
	// manifest, its platform is the twin's.
	Source *layers.Image
	// SBOM attaches a bill of the weight files to the artifact
	// as its OCI referrer (registry only: publish.WithSBOMReferrer), naming
	// Version as its tool.
	SBOM    bool
	Version string
	// Signer signs the image and the artifact (a registry one); nil signs
	// nothing.
	Signer *publish.Signer
	Layers []registry.Option
}

// Result is what Run published.
type Result struct {
	*Stripped
	// Image is the stripped image as written to To (and signed).
	Image *publish.Published
	// Twin is the image twin by digest ("" without ImageTwin); SBOM the
	// artifact's SBOM attestation ("" without one).
	Twin, SBOM string
	// Signed are the signatures: the image's, then the artifact's (when
	// it is in a registry).
	Signed []*sign.Signed
}

// Run is kiln weights strip's ending, after the rewrite diverted the
// weights into c: the artifact published (Finish), its image twin, the
// stripped image labelled to name them and written, the artifact's SBOM,
// and the signatures.
func Run(ctx context.Context, c *weights.Collector, rw Rewritten, o Options) (*Result, error) {
	st, err := Finish(ctx, c, o.WeightsTo, o.Mount, o.Source.Digest.String(), o.Layers...)
	if err != nil {
		return nil, err
	}
	r := &Result{Stripped: st}
	if o.ImageTwin.Kind != "" {
		twin, err := c.Twin(st.Manifest, st.Ref.String(), o.Source.Platform)
		if err != nil {
			return nil, err
		}
		tp, err := publish.Writer(o.Layers...).Publish(ctx, twin, o.ImageTwin)
		if err != nil {
			return nil, fmt.Errorf("--image-twin: %w", err)
		}
		twinRef, err := weights.ArtifactRef(o.ImageTwin, tp.Digest)
		if err != nil {
			return nil, fmt.Errorf("--image-twin: %w", err)
		}
		r.Twin = twinRef.String()
		st.Labels[weights.LabelTwin] = r.Twin
	}
	out, err := rw.Image(st.Labels)
	if err != nil {
		return nil, err
	}
	if r.Image, err = publish.WithSign(publish.Writer(o.Layers...), o.Signer).Publish(ctx, out, o.To); err != nil {
		return nil, err
	}
	if o.SBOM {
		// The artifact Finish wrote, through the publish chain's SBOM.
		pub := publish.WithSBOMReferrer(publish.Writer(o.Layers...), weightsBOM(st.Manifest), o.Version, o.Layers...)
		p, err := pub.Publish(ctx, publish.Pushed(st.Digest), st.Ref)
		if err != nil {
			return nil, err
		}
		r.SBOM = p.SBOM
	}
	if r.Image.Signed != nil {
		r.Signed = append(r.Signed, r.Image.Signed)
		s, err := o.Signer.SignRef(ctx, st.Ref)
		if err != nil {
			return nil, err
		}
		if s != nil {
			r.Signed = append(r.Signed, s)
		}
	}
	return r, nil
}
