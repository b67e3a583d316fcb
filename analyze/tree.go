package analyze

import (
	"strings"

	"github.com/kiln-build/kiln/analyze/classify"
)

// copyRec is one copy of a file as some layer wrote it.
type copyRec struct {
	path    string
	layer   int
	size    int64
	class   classify.Class
	format  string       // weights format, when sniffed
	kernels *kernelArchs // device code, when scanned and found
	deleted bool         // a later layer (or a later entry) removed or replaced it
}

// tree is the merged filesystem as layers are applied in order. Deleting a
// directory detaches its subtree in one step, so whiteouts and opaque
// directories cost the size of what they delete, not of the image.
type tree struct {
	root *tnode
}

type tnode struct {
	children map[string]*tnode
	file     *copyRec // set for non-directories
}

func newTree() *tree { return &tree{root: &tnode{}} }

func (t *tree) lookup(p string, create bool) *tnode {
	n := t.root
	if p == "" {
		return n
	}
	for _, part := range strings.Split(p, "/") {
		c := n.children[part]
		if c == nil {
			if !create {
				return nil
			}
			if n.children == nil {
				n.children = map[string]*tnode{}
			}
			c = &tnode{}
			n.children[part] = c
		}
		n = c
	}
	return n
}

// put records a file at p and returns the copies it supersedes: the old file
// at p, or a whole directory that a file replaces.
func (t *tree) put(c *copyRec) []*copyRec {
	n := t.lookup(c.path, true)
	var gone []*copyRec
	if n.file != nil {
		gone = append(gone, n.file)
	}
	if len(n.children) > 0 {
		gone = collect(n, gone)
		n.children = nil
	}
	n.file = c
	return gone
}

// mkdir makes p a directory; a file that stood there is superseded.
func (t *tree) mkdir(p string) []*copyRec {
	n := t.lookup(p, true)
	if n.file != nil {
		f := n.file
		n.file = nil
		return []*copyRec{f}
	}
	return nil
}

// remove deletes p and everything below it (a whiteout). wasDir reports
// whether p was a directory.
func (t *tree) remove(p string) (gone []*copyRec, wasDir bool) {
	dir, base := "", p
	if i := strings.LastIndex(p, "/"); i >= 0 {
		dir, base = p[:i], p[i+1:]
	}
	parent := t.lookup(dir, false)
	if parent == nil {
		return nil, false
	}
	n := parent.children[base]
	if n == nil {
		return nil, false
	}
	delete(parent.children, base)
	return collect(n, nil), n.file == nil
}

// clear deletes everything below directory p but keeps p (an opaque dir).
func (t *tree) clear(p string) []*copyRec {
	n := t.lookup(p, false)
	if n == nil {
		return nil
	}
	var gone []*copyRec
	for _, c := range n.children {
		gone = collect(c, gone)
	}
	n.children = nil
	return gone
}

func collect(n *tnode, acc []*copyRec) []*copyRec {
	if n.file != nil {
		acc = append(acc, n.file)
	}
	for _, c := range n.children {
		acc = collect(c, acc)
	}
	return acc
}

// walkFiles calls fn for every file still visible.
func (t *tree) walkFiles(fn func(*copyRec)) {
	var rec func(*tnode)
	rec = func(n *tnode) {
		if n.file != nil {
			fn(n.file)
		}
		for _, c := range n.children {
			rec(c)
		}
	}
	rec(t.root)
}
