package overlay

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Kind is what a node is to the squash.
type Kind uint8

const (
	// File is anything that is neither a directory nor a symlink: regular
	// files, hard links, devices, fifos. It has no children.
	File Kind = iota
	// Dir is a directory.
	Dir
	// Symlink is a symbolic link: Resolve follows it, Add refuses to write
	// below it.
	Symlink
)

// MaxHops is how many symlinks Resolve follows in one lookup, Linux's
// MAXSYMLINKS: a longer chain is taken as a loop.
const MaxHops = 40

// Node is one visible path of a Tree.
type Node[T any] struct {
	name     string
	parent   *Node[T]
	kids     *kids[T] // a directory's children, once it has had one
	value    T
	link     string // a symlink's target, as the entry said
	kind     Kind
	declared bool // put by an entry, not implied by a path below it
}

// kids are a directory's children. Most nodes are files, so the map and
// the sorted cache live apart from Node and only directories pay for them.
type kids[T any] struct {
	byName map[string]*Node[T]
	sorted []*Node[T] // in name order; nil when a child came or went
}

// Name is the node's last path component ("" for the root).
func (n *Node[T]) Name() string { return n.name }

// Value is what the entry that put the node there carried: the zero T for
// the root and for directories only implied by a path below them.
func (n *Node[T]) Value() T { return n.value }

// Kind says whether the node is a file, a directory or a symlink.
func (n *Node[T]) Kind() Kind { return n.kind }

// IsDir reports whether the node is a directory.
func (n *Node[T]) IsDir() bool { return n.kind == Dir }

// Link is a symlink's target as its entry gave it ("" for other kinds).
func (n *Node[T]) Link() string { return n.link }

// Path is the node's cleaned path from the root, without a leading slash.
func (n *Node[T]) Path() string {
	size := -1
	for c := n; c.parent != nil; c = c.parent {
		size += len(c.name) + 1
	}
	if size <= 0 {
		return ""
	}
	b := make([]byte, size)
	i := size
	for c := n; c.parent != nil; c = c.parent {
		i -= len(c.name)
		copy(b[i:], c.name)
		if i > 0 {
			i--
			b[i] = '/'
		}
	}
	return string(b)
}

// Children are a directory's children in name order. The slice is the
// node's own (sorting is paid once per change, not per walk): do not
// modify it.
func (n *Node[T]) Children() []*Node[T] {
	k := n.kids
	if k == nil || len(k.byName) == 0 {
		return nil
	}
	if k.sorted == nil {
		k.sorted = make([]*Node[T], 0, len(k.byName))
		for _, c := range k.byName {
			k.sorted = append(k.sorted, c)
		}
		slices.SortFunc(k.sorted, func(a, b *Node[T]) int { return strings.Compare(a.name, b.name) })
	}
	return k.sorted
}

// Walk calls fn for n and everything below it, parents first, children in
// name order.
func (n *Node[T]) Walk(fn func(*Node[T])) {
	fn(n)
	for _, c := range n.Children() {
		c.Walk(fn)
	}
}

// Range calls fn for n and everything below it, parents first, in no
// particular order: Walk without the sorting, for callers that only add
// up or sort what they collect (kiln analyze's final walk spends a tenth
// of its squash sorting directories otherwise).
func (n *Node[T]) Range(fn func(*Node[T])) {
	fn(n)
	if n.kids != nil {
		for _, c := range n.kids.byName {
			c.Range(fn)
		}
	}
}

func (n *Node[T]) child(name string) *Node[T] {
	if n.kids == nil {
		return nil
	}
	return n.kids.byName[name]
}

func (n *Node[T]) attach(c *Node[T]) {
	if n.kids == nil {
		n.kids = &kids[T]{byName: map[string]*Node[T]{}}
	}
	c.parent = n
	n.kids.byName[c.name] = c
	n.kids.sorted = nil
}

// drop hides n and its subtree: gone sees every declared value in it.
func (n *Node[T]) drop(gone func(T)) {
	n.Walk(func(c *Node[T]) {
		if c.declared {
			gone(c.value)
		}
	})
	if p := n.parent; p != nil {
		delete(p.kids.byName, n.name)
		p.kids.sorted = nil
		n.parent = nil
	}
}

// Tree is the filesystem layers add up to. The zero Tree is not usable:
// make one with New.
type Tree[T any] struct {
	root *Node[T]
}

// New returns an empty tree: a root directory.
func New[T any]() *Tree[T] { return &Tree[T]{root: &Node[T]{kind: Dir}} }

// Root is the root directory.
func (t *Tree[T]) Root() *Node[T] { return t.root }

// errRootKind refuses a non-directory for the root, which every path
// goes through.
var errRootKind = errors.New("the root is a directory: an entry of another kind cannot replace it")

// LinkError is Add's refusal of an entry below a symlink.
type LinkError struct {
	Path   string // the entry's cleaned path
	Link   string // the symlink's path, a prefix of Path
	Target string // what the symlink points to
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("entry %q is written through the symlink /%s → %s", e.Path, e.Link, e.Target)
}

// Add puts an entry of kind k with value v at p (link is a symlink's
// target) and hides what stood in its way, calling gone for each value
// hidden (see the package comment for what that is).
func (t *Tree[T]) Add(p string, k Kind, link string, v T, gone func(T)) error {
	p = clean(p)
	parent, name := t.root, p
	for rest := p; ; {
		part, tail, more := strings.Cut(rest, "/")
		if !more {
			name = part
			break
		}
		c := parent.child(part)
		switch {
		case c == nil:
		case c.kind == Dir:
			parent, rest = c, tail
			continue
		case c.kind == Symlink:
			return &LinkError{Path: p, Link: p[:len(p)-len(tail)-1], Target: c.link}
		default:
			c.drop(gone)
		}
		c = &Node[T]{name: part, kind: Dir}
		parent.attach(c)
		parent, rest = c, tail
	}
	ex := t.root
	if p != "" {
		ex = parent.child(name)
	} else if k != Dir {
		return errRootKind
	}
	if ex != nil && ex.kind == Dir && k == Dir {
		if ex.declared {
			gone(ex.value)
		}
		ex.value, ex.declared = v, true
		return nil
	}
	if ex != nil {
		ex.drop(gone)
	}
	n := &Node[T]{name: name, kind: k, value: v, declared: true}
	if k == Symlink {
		n.link = link
	}
	parent.attach(n)
	return nil
}

// Whiteout hides p and everything below it; wasDir reports whether p was
// a directory. The root cannot be whited out.
func (t *Tree[T]) Whiteout(p string, gone func(T)) (wasDir bool) {
	n := t.Lookup(p)
	if n == nil || n == t.root {
		return false
	}
	n.drop(gone)
	return n.kind == Dir
}

// Opaque hides everything below directory p, keeping p.
func (t *Tree[T]) Opaque(p string, gone func(T)) {
	n := t.Lookup(p)
	if n == nil || n.kind != Dir {
		return
	}
	for _, c := range n.Children() {
		c.drop(gone)
	}
}

// Lookup finds the node at p without following symlinks; nil when absent.
func (t *Tree[T]) Lookup(p string) *Node[T] {
	n := t.root
	for rest := clean(p); rest != "" && n != nil; {
		var part string
		part, rest, _ = strings.Cut(rest, "/")
		n = n.child(part)
	}
	return n
}

// Resolve finds the node p names with symlinks followed in every
// component, inside the tree as a runtime resolves them in a container's
// root; nil when it does not exist or more than MaxHops links are
// followed.
func (t *Tree[T]) Resolve(p string) *Node[T] {
	n, hops := t.root, 0
	for rest := clean(p); rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, "/")
		c := n.child(part)
		if c == nil {
			return nil
		}
		if c.kind == Symlink {
			if hops++; hops > MaxHops {
				return nil
			}
			target := c.link
			if !strings.HasPrefix(target, "/") {
				target = n.Path() + "/" + target
			}
			n, rest = t.root, clean(target+"/"+rest)
			continue
		}
		n = c
	}
	return n
}

// clean makes p a root-relative path with no "", "." or ".." component;
// paths that are already so (nearly all of them) are returned as they are,
// without allocating.
func clean(p string) string {
	for start, i := 0, 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch p[start:i] {
		case "", ".", "..":
			if p == "" {
				return p
			}
			return strings.TrimPrefix(path.Clean("/"+p), "/")
		}
		start = i + 1
	}
	return p
}
