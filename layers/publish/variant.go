package publish

import (
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
)

// Convert makes a variant of src: convert.ToZstd, ToEStargz or ToErofs
// with their options. The caller closes the result.
type Convert func(ctx context.Context, src v1.Image) (*convert.Result, error)

// Variant is a converted image as it was published.
type Variant struct {
	*Published
	// Image is the variant image's own manifest digest (with an SBOM,
	// Published.Digest is the index holding it).
	Image v1.Hash
	// Layers is the conversion's per-layer report.
	Layers []convert.LayerReport
}

// PublishVariant converts src with conv and publishes the variant at ref
// through pub (its SBOM and signature as pub's decorators add them); the
// conversion's scratch files are removed once it is written. This is the
// one "make a variant and write it" of build --format erofs, convert and
// slim --format erofs.
func PublishVariant(ctx context.Context, pub Interface, conv Convert, src v1.Image, ref layers.Ref) (*Variant, error) {
	res, err := conv(ctx, src)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	dg, err := res.Image.Digest()
	if err != nil {
		return nil, err
	}
	p, err := pub.Publish(ctx, res.Image, ref)
	if err != nil {
		return nil, err
	}
	return &Variant{Published: p, Image: dg, Layers: res.Layers}, nil
}

// Erofs is the native EROFS conversion (convert.ToErofs with o, comp
// inside each layer); its errors say --format erofs.
func Erofs(o convert.Options, comp erofs.Compression) Convert {
	return func(ctx context.Context, src v1.Image) (*convert.Result, error) {
		res, err := convert.ToErofs(ctx, src, o, comp)
		if err != nil {
			return nil, fmt.Errorf("--format erofs: %w", err)
		}
		return res, nil
	}
}
