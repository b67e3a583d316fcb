package convert

import (
	"context"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// openV1 opens ref as kiln convert does: layers.Open, then its ggcr view.
func openV1(t *testing.T, ctx context.Context, ref string) (v1.Image, error) {
	img, err := testkit.OpenImage(ctx, ref)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { img.Close() })
	return img.V1(ctx)
}

func mutateConfig(img v1.Image, cf *v1.ConfigFile) (v1.Image, error) {
	return mutate.ConfigFile(img, cf)
}
