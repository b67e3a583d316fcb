package convert

import (
	"context"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"

	"github.com/kiln-build/kiln/layers"
)

// ToEStargz converts src's layers to eStargz for lazy pulls, the files of
// startup (absolute paths: what kiln slim --format estargz --probe
// recorded with --startup-list) first in each layer that holds them (see
// layers.WriteEStargz). Each source blob is first streamed once into a
// zstd scratch file, as ToZstd does (which verifies its digest and diff
// ID), and that file is read twice to lay the eStargz blob out; the zstd
// files go as soon as the eStargz ones are written. The config is the
// source's with the eStargz tars' diff IDs (history unchanged); the report's
// To, ToSize and Ratio are the eStargz blob's.
func ToEStargz(ctx context.Context, src v1.Image, o Options, startup []string) (*Result, error) {
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	z, err := ToZstd(ctx, src, o)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	cfg, err := src.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %v", err)
	}
	cfg = cfg.DeepCopy()
	zls, err := z.Image.Layers()
	if err != nil {
		return nil, err
	}
	set := layers.NewStartupSet(startup)
	res, err := newResult(o, 0)
	if err != nil {
		return nil, err
	}
	res.Layers = z.Layers
	blobs := make([]*layers.EStargzBlob, len(zls))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(o.Jobs, 1))
	for i, l := range zls {
		g.Go(func() error {
			b, err := layers.WriteEStargz(gctx, l.Compressed, res.dir, set)
			if err != nil {
				return fmt.Errorf("layer %d (%s): eStargz: %w", i, res.Layers[i].From, err)
			}
			blobs[i] = b
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		res.Close()
		return nil, err
	}
	adds := make([]mutate.Addendum, len(blobs))
	for i, b := range blobs {
		adds[i] = mutate.Addendum{Layer: layers.NewFileLayer(b.Path, b.Digest, b.DiffID, b.Size, b.UncompressedSize, types.OCILayer),
			MediaType: types.OCILayer, Annotations: b.Annotations()}
		cfg.RootFS.DiffIDs[i] = b.DiffID
		r := &res.Layers[i]
		r.StartupFiles, r.Skipped = b.StartupFiles, false
		r.setTo(b.Digest.String(), b.Size)
	}
	return res.finish(adds, cfg)
}
