package analyze

import (
	"errors"
	"fmt"
	"path"

	"github.com/kiln-build/kiln/layers/overlay"
)

// linkedWrites puts one layer's entries in the squashed tree. The tree
// refuses an entry below a symlink; a runtime writes it where the link
// leads (containerd resolves the parent inside the root), so that is where
// it is counted. Such entries get one warning per layer, not one each: a
// layer that writes lib/... over a merged-/usr base can hold thousands.
type linkedWrites struct {
	layer          int
	followed, lost int
	first          error
}

func (w *linkedWrites) add(t *overlay.Tree[*copyRec], e *scanEntry, k overlay.Kind, c *copyRec, gone func(*copyRec)) {
	err := t.Add(e.path, k, e.link, c, gone)
	if err == nil {
		return
	}
	if w.first == nil {
		w.first = err
	}
	var le *overlay.LinkError
	if errors.As(err, &le) {
		if d := t.Resolve(path.Dir(le.Path)); d != nil && d.IsDir() {
			if t.Add(path.Join(d.Path(), path.Base(le.Path)), k, e.link, c, gone) == nil {
				w.followed++
				return
			}
		}
	}
	w.lost++
}

func (w *linkedWrites) warnings() []string {
	if w.first == nil {
		return nil
	}
	s := fmt.Sprintf("layer %d: %d entries could not be placed as written (the first: %v)", w.layer, w.followed+w.lost, w.first)
	if w.followed > 0 {
		s += fmt.Sprintf("; %d counted where their symlinks lead, as a runtime writes them", w.followed)
	}
	if w.lost > 0 {
		s += fmt.Sprintf("; %d lead nowhere (a dangling or looping link) and are left out of the final filesystem", w.lost)
	}
	return []string{s}
}
