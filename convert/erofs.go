package convert

import (
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
)

// ToErofs converts src's layers to native EROFS layers (layers.ErofsMediaType):
// each source blob streams, verified, through its decoder into
// mkfs.erofs (layers/erofs: only what kiln's tar reader accepts, sizes
// bounded by what the blob can decode to), compressed inside with comp;
// the tar's diff ID is checked against the config as it passes. An EROFS blob is not
// compressed on the wire, so its digest is also its diff ID, as
// containerd's own converter records it: the config is the source's with
// those diff IDs (history unchanged). The same source gives the same
// image digest.
func ToErofs(ctx context.Context, src v1.Image, o Options, comp erofs.Compression) (*Result, error) {
	if err := erofs.Check(ctx); err != nil {
		return nil, err
	}
	cfg, res, out, err := convertLayers(ctx, src, o, func(ctx context.Context, l v1.Layer, diffID v1.Hash, dir string) (v1.Layer, LayerReport, error) {
		return erofsLayer(ctx, l, diffID, dir, o, comp)
	})
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	adds := make([]mutate.Addendum, len(out))
	for i, l := range out {
		adds[i] = mutate.Addendum{Layer: l, MediaType: layers.ErofsMediaType}
		cfg.RootFS.DiffIDs[i], _ = l.DiffID()
	}
	return res.finish(adds, cfg)
}

// erofsLayer is one layer's conversion: the verified, decoded tar into
// mkfs.erofs and the image into a scratch blob, hashed as it is written.
func erofsLayer(ctx context.Context, l v1.Layer, diffID v1.Hash, dir string, o Options, comp erofs.Compression) (v1.Layer, LayerReport, error) {
	var rep LayerReport
	src, err := openSource(ctx, l, dir, o, &rep)
	if err != nil {
		return nil, rep, err
	}
	defer src.close()
	tr := &layers.CountingReader{R: src.tar} // the tar bytes that reached mkfs.erofs
	if _, err := erofs.Convert(ctx, tr, src.sc, erofs.WithCompression(comp), erofs.WithDiffID(diffID), erofs.WithTempDir(dir), erofs.WithMaxSize(src.maxTar())); err != nil {
		return nil, rep, fmt.Errorf("blob %s: %w", src.dg, err)
	}
	edg, file, err := src.commit(diffID, tr.N, &rep)
	if err != nil {
		return nil, rep, err
	}
	return layers.NewFileLayer(file, edg, edg, rep.ToSize, rep.ToSize, layers.ErofsMediaType), rep, nil
}
