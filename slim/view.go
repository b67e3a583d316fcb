package slim

import (
	"fmt"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/overlay"
)

// view is the filesystem the layers add up to; a node's value is the
// record that put it there (nil for a directory no layer declared, created
// implicitly by a file below it).
type (
	view  = overlay.Tree[*rec]
	vnode = overlay.Node[*rec]
)

// apply adds one layer to v. gone receives every record hidden from the
// final filesystem by this layer (superseded or deleted). A hardlink's
// linkTo is set to the record holding its content as the link is made:
// a later entry may replace the target's name, not what the link shares.
func apply(v *view, recs []*rec, gone func(*rec)) error {
	// Whiteouts and opaque markers hide lower layers' files, not this
	// layer's, whatever their position in the tar: apply them first.
	for _, r := range recs {
		switch r.kind {
		case kWhiteout:
			v.Whiteout(r.path, gone)
		case kOpaque:
			v.Opaque(r.path, gone)
		}
	}
	for _, r := range recs {
		k := overlay.File
		switch r.kind {
		case kWhiteout, kOpaque:
			continue
		case kDir:
			k = overlay.Dir
		case kSymlink:
			k = overlay.Symlink
		case kHardlink:
			if err := linkTo(v, r); err != nil {
				return err
			}
		}
		if err := v.Add(r.path, k, r.linkname, r, gone); err != nil {
			return fmt.Errorf("layer %d: %w: refusing a layer whose meaning depends on how the runtime follows links", r.layer, err)
		}
	}
	return nil
}

// linkTo points hardlink r at the record holding its content: its target's,
// or the target's own target when that is a hardlink to a file.
func linkTo(v *view, r *rec) error {
	t, _ := layers.CleanPath(r.linkname)
	tn := v.Lookup(t)
	if tn == nil || tn.IsDir() {
		return fmt.Errorf("layer %d: hardlink %q → %q: no such file in this layer or below", r.layer, r.path, r.linkname)
	}
	r.linkTo = tn.Value()
	if r.linkTo.kind == kHardlink {
		r.linkTo = r.linkTo.linkTo
	}
	if r.linkTo == nil || r.linkTo.kind != kFile {
		// A hardlink to a symlink or device: keep the link
		// target's own record as the content source.
		r.linkTo = tn.Value()
	}
	return nil
}
