package testimage

import (
	"archive/tar"
	"fmt"
)

// SquashEntry is one entry of a SquashLayers image, as layers.WalkTar
// reports it: its path cleaned, its whiteout marker parsed.
type SquashEntry struct {
	Path string
	Type byte // a tar typeflag, or TypeWhiteout or TypeOpaque
	Size int64
	Link string // a symlink's or hard link's target
}

// Types of SquashEntry beside tar's: a whiteout deletes Path, an opaque
// marker hides what lower layers have below directory Path.
const (
	TypeWhiteout byte = 'W'
	TypeOpaque   byte = 'O'
)

// SquashLayers is a synthetic image shaped like a CUDA build, for timing a
// squash without reading tars: nLayers layers of perLayer files in
// directories of 50, each overwriting a tenth of the layer below it,
// whiting out a directory and a file two layers down, making a directory
// three layers down opaque, and adding symlinks (relative, so following
// them climbs) and hard links.
//
// rec makes the caller's record of entry ord of layer l, so each package
// times its own squash on the same image.
func SquashLayers[R any](nLayers, perLayer int, rec func(l, ord int, e SquashEntry) R) [][]R {
	out := make([][]R, nLayers)
	for l := range nLayers {
		var es []SquashEntry
		file := func(l, i int) string { return fmt.Sprintf("opt/l%02d/d%03d/f%05d.so", l, i/50, i) }
		if l >= 2 {
			es = append(es,
				SquashEntry{Path: fmt.Sprintf("opt/l%02d/d%03d", l-2, 0), Type: TypeWhiteout},
				SquashEntry{Path: file(l-2, 50), Type: TypeWhiteout})
		}
		if l >= 3 {
			es = append(es, SquashEntry{Path: fmt.Sprintf("opt/l%02d/d%03d", l-3, 2), Type: TypeOpaque})
		}
		for i := range perLayer {
			if i%50 == 0 {
				es = append(es, SquashEntry{Path: fmt.Sprintf("opt/l%02d/d%03d", l, i/50), Type: tar.TypeDir})
			}
			es = append(es, SquashEntry{Path: file(l, i), Type: tar.TypeReg, Size: int64(1000 + i)})
			if l > 0 && i%10 == 0 {
				es = append(es, SquashEntry{Path: file(l-1, i), Type: tar.TypeReg, Size: int64(2000 + i)})
			}
			if i%100 == 0 {
				es = append(es,
					SquashEntry{Path: fmt.Sprintf("usr/bin/l%02d-%05d", l, i), Type: tar.TypeSymlink, Link: "../../" + file(l, i)},
					SquashEntry{Path: fmt.Sprintf("usr/lib/l%02d-%05d", l, i), Type: tar.TypeLink, Link: file(l, i)})
			}
		}
		for i, e := range es {
			out[l] = append(out[l], rec(l, i, e))
		}
	}
	return out
}
