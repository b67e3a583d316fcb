package slim

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/kiln-build/kiln/internal/parallel"
	"github.com/kiln-build/kiln/layers"
)

// AddEStargz writes every layer once more as an eStargz blob
// (layers.WriteEStargz, from the layer's first blob, decoded twice as a
// stream) with the files of startup that are in the layer placed first
// and followed by the prefetch landmark: the stargz snapshotter fetches
// that region before it mounts the layer and every other file on first
// read. startup lists absolute paths in the image (what ProbeRecord
// returned); its order does not matter, and the same input gives the same
// digests. The eStargz tar is not the other encodings' tar, so its layers
// have their own diff IDs and ImageFor(layers.EStargz) its own image ID.
func (r *Result) AddEStargz(ctx context.Context, startup []string) error {
	if slices.Contains(r.comps, layers.EStargz) {
		return fmt.Errorf("slim: eStargz blobs already written")
	}
	set := layers.NewStartupSet(startup)
	ebs := make([]*layers.EStargzBlob, len(r.layers))
	// Several layers at once, as Rewrite read them (Options.Concurrency):
	// the gzip encoder is one goroutine per layer.
	if err := parallel.ForEach(ctx, len(r.layers), max(r.conc, 1), func(ctx context.Context, i int) error {
		l := r.layers[i]
		src := l.blobs[0]
		eb, err := layers.WriteEStargz(ctx, func() (io.ReadCloser, error) { return os.Open(src.path) }, filepath.Dir(src.path), set)
		if err != nil {
			return fmt.Errorf("slim: eStargz of the %s layer (blob %s): %w", l.name, src.digest, err)
		}
		ebs[i] = eb
		return nil
	}); err != nil {
		for _, eb := range ebs {
			if eb != nil {
				os.Remove(eb.Path)
			}
		}
		return err
	}
	for i, l := range r.layers {
		eb := ebs[i]
		b := blob{comp: layers.EStargz, path: eb.Path, digest: eb.Digest, size: eb.Size,
			diffID: eb.DiffID, usize: eb.UncompressedSize, annotations: eb.Annotations()}
		l.blobs = append(l.blobs, b)
		if r.Report != nil {
			r.Report.StartupInImage += eb.StartupFiles
		}
		if r.Report != nil && i < len(r.Report.Layers) {
			r.Report.Layers[i].Blobs = append(r.Report.Layers[i].Blobs, LayerBlob{Compression: string(b.comp), Digest: b.digest.String(),
				CompressedSize: b.size, DiffID: b.diffID.String(), StartupFiles: eb.StartupFiles})
		}
	}
	r.comps = append(r.comps, layers.EStargz)
	return nil
}
