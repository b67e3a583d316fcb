package slim

import (
	"archive/tar"
	"testing"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// BenchmarkMakePlan times squashing testimage.SquashLayers(20, 5000),
// about 113,000 entries, and planning them under a policy that keeps
// everything: the view, its walks, symlink resolution and the layer split
// (reading layers is timed elsewhere).
func BenchmarkMakePlan(b *testing.B) {
	recs := testimage.SquashLayers(20, 5000, func(l, ord int, e testimage.SquashEntry) *rec {
		return &rec{layer: l, ord: ord, path: e.Path, kind: benchKinds[e.Type], size: e.Size, linkname: e.Link, class: classify.ClassifyPath(e.Path)}
	})
	img := &layers.Image{Layers: make([]*layers.Layer, len(recs))}
	scans := make([]*layerScan, len(recs))
	for l := range recs {
		img.Layers[l] = &layers.Layer{Index: l}
		scans[l] = &layerScan{recs: recs[l]}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := makePlan(img, scans, &Options{Policy: keepAll()}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchKinds are the record kinds of SquashLayers' entry types.
var benchKinds = map[byte]uint8{
	tar.TypeDir: kDir, tar.TypeReg: kFile, tar.TypeSymlink: kSymlink, tar.TypeLink: kHardlink,
	testimage.TypeWhiteout: kWhiteout, testimage.TypeOpaque: kOpaque,
}
