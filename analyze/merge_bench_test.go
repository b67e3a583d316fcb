package analyze

import (
	"archive/tar"
	"testing"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// BenchmarkMerge is the part of kiln analyze that is not reading layers,
// on the ~113,000 entries of testimage.SquashLayers(20, 5000): the
// squash, dive's waste and efficiency, and the walk of what is visible.
func BenchmarkMerge(b *testing.B) {
	kinds := map[byte]uint8{tar.TypeDir: kDir, tar.TypeReg: kFile, tar.TypeSymlink: kSymlink, tar.TypeLink: kLink,
		testimage.TypeWhiteout: kWhiteout, testimage.TypeOpaque: kOpaque}
	entries := testimage.SquashLayers(20, 5000, func(_, _ int, e testimage.SquashEntry) scanEntry {
		return scanEntry{path: e.Path, link: e.Link, size: e.Size, class: classify.ClassifyPath(e.Path), kind: kinds[e.Type]}
	})
	img := &layers.Image{}
	scans := make([]*layerScan, len(entries))
	for i, es := range entries {
		img.Layers = append(img.Layers, &layers.Layer{Index: i})
		scans[i] = &layerScan{entries: es}
	}
	b.ReportAllocs()
	for b.Loop() {
		merge(img, scans, Options{TopN: 10})
	}
}
