package slim

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// vnode is one path of the squashed filesystem. r is nil for a directory no
// layer declared (created implicitly by a file below it).
type vnode struct {
	name     string
	parent   *vnode
	children map[string]*vnode
	r        *rec
	dir      bool
}

// view is the filesystem the layers add up to, built by applying layers in
// order with a container runtime's semantics.
type view struct {
	root *vnode
}

func newView() *view { return &view{root: &vnode{dir: true}} }

func (n *vnode) fullPath() string {
	var parts []string
	for c := n; c.parent != nil; c = c.parent {
		parts = append(parts, c.name)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/")
}

// lookup finds p without following symlinks.
func (v *view) lookup(p string) *vnode {
	n := v.root
	if p == "" {
		return n
	}
	for _, part := range strings.Split(p, "/") {
		if n.children == nil {
			return nil
		}
		n = n.children[part]
		if n == nil {
			return nil
		}
	}
	return n
}

func (n *vnode) detach() {
	if n.parent != nil {
		delete(n.parent.children, n.name)
		n.parent = nil
	}
}

// apply adds one layer. gone receives every record hidden from the final
// filesystem by this layer (superseded or deleted).
func (v *view) apply(recs []*rec, gone func(*rec)) error {
	drop := func(n *vnode) {
		n.walk(func(c *vnode) {
			if c.r != nil {
				gone(c.r)
			}
		})
		n.detach()
	}
	// Whiteouts and opaque markers hide lower layers' files, not this
	// layer's, whatever their position in the tar: apply them first.
	for _, r := range recs {
		switch r.kind {
		case kWhiteout:
			if n := v.lookup(r.path); n != nil && n != v.root {
				drop(n)
			}
		case kOpaque:
			if n := v.lookup(r.path); n != nil && n.dir {
				for _, c := range n.sortedChildren() {
					drop(c)
				}
			}
		}
	}
	for _, r := range recs {
		if r.kind == kWhiteout || r.kind == kOpaque {
			continue
		}
		parent := v.root
		parts := strings.Split(r.path, "/")
		for i, part := range parts[:len(parts)-1] {
			c := parent.children[part]
			switch {
			case c == nil:
			case c.dir:
				parent = c
				continue
			case c.r != nil && c.r.kind == kSymlink:
				return fmt.Errorf("layer %d: entry %q is written through the symlink /%s → %s: refusing a layer whose meaning depends on how the runtime follows links", r.layer, r.path, strings.Join(parts[:i+1], "/"), c.r.linkname)
			default:
				drop(c)
			}
			c = &vnode{name: part, parent: parent, dir: true}
			if parent.children == nil {
				parent.children = map[string]*vnode{}
			}
			parent.children[part] = c
			parent = c
		}
		name := parts[len(parts)-1]
		ex := parent.children[name]
		if r.kind == kHardlink {
			t, _ := cleanLink(r.linkname)
			tn := v.lookup(t)
			if tn == nil || tn.dir || tn.r == nil {
				return fmt.Errorf("layer %d: hardlink %q → %q: no such file in this layer or below", r.layer, r.path, r.linkname)
			}
			r.linkTo = tn.r
			if tn.r.kind == kHardlink {
				r.linkTo = tn.r.linkTo
			}
			if r.linkTo == nil || r.linkTo.kind != kFile {
				// A hardlink to a symlink or device: keep the link
				// target's own record as the content source.
				r.linkTo = tn.r
			}
		}
		if ex != nil && ex.dir && r.kind == kDir {
			if ex.r != nil {
				gone(ex.r)
			}
			ex.r = r
			continue
		}
		if ex != nil {
			drop(ex)
		}
		if parent.children == nil {
			parent.children = map[string]*vnode{}
		}
		parent.children[name] = &vnode{name: name, parent: parent, r: r, dir: r.kind == kDir}
	}
	return nil
}

func cleanLink(name string) (string, bool) {
	p := path.Clean("/" + strings.ReplaceAll(name, "\\", "/"))
	return strings.TrimPrefix(p, "/"), false
}

func (n *vnode) sortedChildren() []*vnode {
	names := make([]string, 0, len(n.children))
	for k := range n.children {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]*vnode, len(names))
	for i, k := range names {
		out[i] = n.children[k]
	}
	return out
}

// walk visits n and its subtree, parents first, children in name order.
func (n *vnode) walk(fn func(*vnode)) {
	fn(n)
	for _, c := range n.sortedChildren() {
		c.walk(fn)
	}
}

// resolve follows symlinks (inside the root, as runtimes do) to the node p
// names; nil when it does not exist or the links loop.
func (v *view) resolve(p string, hops int) *vnode {
	if hops > 40 {
		return nil
	}
	n := v.root
	parts := strings.Split(p, "/")
	if p == "" {
		return n
	}
	for i, part := range parts {
		if !n.dir || n.children == nil {
			return nil
		}
		c := n.children[part]
		if c == nil {
			return nil
		}
		if c.r != nil && c.r.kind == kSymlink {
			base := n.fullPath()
			t := c.r.linkname
			var next string
			if strings.HasPrefix(t, "/") {
				next = path.Clean(t)
			} else {
				next = path.Clean("/" + path.Join(base, t))
			}
			rest := strings.Join(parts[i+1:], "/")
			full := strings.TrimPrefix(path.Join(next, rest), "/")
			return v.resolve(full, hops+1)
		}
		n = c
	}
	return n
}
