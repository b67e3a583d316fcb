package analyze

import (
	"container/heap"
	"fmt"
	"path"
	"sort"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/layers/overlay"
)

// TreeNode is one box of the squashed filesystem's treemap: a file, a
// directory whose entries are listed, or a directory (or a group of small
// entries) summed into one box so that the tree stays small.
type TreeNode struct {
	Name string `json:"name"`
	// Path is the absolute path ("" for a group of small entries).
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Files is the number of regular files the node sums.
	Files int `json:"files"`
	// Class and Layer are the file's, or for a summed node the class and
	// layer holding most of its bytes.
	Class classify.Class `json:"class"`
	Layer int            `json:"layer"`
	// Dir is set for directories, expanded (Children) or summed.
	Dir bool `json:"dir,omitempty"`
	// Children, largest first; nil for files and summed nodes.
	Children []*TreeNode `json:"children,omitempty"`
}

// Summed says whether the node stands for entries it does not list.
func (n *TreeNode) Summed() bool { return (n.Dir || n.Path == "") && n.Children == nil }

// DefaultTreeNodes bounds Options.TreeNodes' tree when it is negative.
const DefaultTreeNodes = 5000

// fsNode is the full squashed tree with sizes summed per directory.
type fsNode struct {
	name    string
	path    string
	size    int64
	files   int
	file    *copyRec
	byClass map[classify.Class]int64
	byLayer map[int]int64
	kids    []*fsNode
}

func sumTree(n *overlay.Node[*copyRec], p string) *fsNode {
	f := &fsNode{name: n.Name(), path: p}
	if c := n.Value(); c != nil {
		if n.Kind() != overlay.File {
			return nil // symlinks and links carry no bytes
		}
		f.file, f.size, f.files = c, c.size, 1
		return f
	}
	if !n.IsDir() {
		return nil
	}
	f.byClass, f.byLayer = map[classify.Class]int64{}, map[int]int64{}
	for _, ch := range n.Children() {
		k := sumTree(ch, path.Join(p, ch.Name()))
		if k == nil {
			continue
		}
		f.kids = append(f.kids, k)
		f.size += k.size
		f.files += k.files
		if k.file != nil {
			f.byClass[k.file.class] += k.size
			f.byLayer[k.file.layer] += k.size
			continue
		}
		for c, b := range k.byClass {
			f.byClass[c] += b
		}
		for l, b := range k.byLayer {
			f.byLayer[l] += b
		}
	}
	sort.SliceStable(f.kids, func(a, b int) bool {
		if f.kids[a].size != f.kids[b].size {
			return f.kids[a].size > f.kids[b].size
		}
		return f.kids[a].name < f.kids[b].name
	})
	return f
}

// dominant returns the key holding the most bytes (the smallest key on
// ties, so the result does not depend on map order).
func dominant[K classify.Class | int](m map[K]int64) K {
	var best K
	var bestN int64 = -1
	for k, n := range m {
		if n > bestN || n == bestN && k < best {
			best, bestN = k, n
		}
	}
	return best
}

func (f *fsNode) leaf() *TreeNode {
	t := &TreeNode{Name: f.name, Path: "/" + f.path, Size: f.size, Files: f.files}
	if f.file != nil {
		t.Class, t.Layer = f.file.class, f.file.layer
		return t
	}
	t.Dir, t.Class, t.Layer = true, dominant(f.byClass), dominant(f.byLayer)
	return t
}

// dirQueue orders directories to expand, largest first.
type dirQueue []*pending

type pending struct {
	f *fsNode
	t *TreeNode
}

func (q dirQueue) Len() int           { return len(q) }
func (q dirQueue) Less(a, b int) bool { return q[a].f.size > q[b].f.size }
func (q dirQueue) Swap(a, b int)      { q[a], q[b] = q[b], q[a] }
func (q *dirQueue) Push(x any)        { *q = append(*q, x.(*pending)) }
func (q *dirQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// boundTree lists the largest directories first until maxNodes nodes are
// used: a directory whose entries would pass the bound stays one summed
// box, and entries too small to draw (under 1/100,000 of the image) are
// summed into one box per directory. A 5 GB CUDA image's 100,000 files
// become a few thousand boxes that still show every large file.
func boundTree(root *fsNode, maxNodes int) *TreeNode {
	top := root.leaf()
	top.Name, top.Path = "/", "/"
	minSize := root.size / 100000
	q := &dirQueue{{root, top}}
	nodes := 1
	for q.Len() > 0 {
		p := heap.Pop(q).(*pending)
		var kids []*TreeNode
		var from, small []*fsNode
		for _, k := range p.f.kids {
			if k.size <= minSize {
				small = append(small, k)
				continue
			}
			kids, from = append(kids, k.leaf()), append(from, k)
		}
		if len(small) == 1 {
			kids, from, small = append(kids, small[0].leaf()), append(from, small[0]), nil
		}
		n := len(kids)
		if len(small) > 0 {
			n++
		}
		if nodes+n > maxNodes {
			continue // stays one summed box
		}
		nodes += n
		for i, k := range from {
			if k.file == nil && len(k.kids) > 0 {
				heap.Push(q, &pending{k, kids[i]})
			}
		}
		if len(small) > 0 {
			g := &TreeNode{Name: fmt.Sprintf("%d small entries", len(small))}
			by, bl := map[classify.Class]int64{}, map[int]int64{}
			for _, s := range small {
				g.Size += s.size
				g.Files += s.files
				l := s.leaf()
				by[l.Class] += s.size
				bl[l.Layer] += s.size
			}
			g.Class, g.Layer = dominant(by), dominant(bl)
			kids = append(kids, g)
		}
		p.t.Children = kids
	}
	return top
}

// squashedTree returns the squashed filesystem as a treemap tree of at most
// maxNodes nodes (DefaultTreeNodes when maxNodes ≤ 0).
func squashedTree(t *overlay.Tree[*copyRec], maxNodes int) *TreeNode {
	if maxNodes <= 0 {
		maxNodes = DefaultTreeNodes
	}
	root := sumTree(t.Root(), "")
	if root == nil {
		return &TreeNode{Name: "/", Path: "/", Dir: true}
	}
	return boundTree(root, maxNodes)
}
