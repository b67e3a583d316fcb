package slim

import (
	"fmt"

	"github.com/kiln-build/kiln/internal/bytesize"
)

// DefaultMaxLayerSize is kiln slim's --max-layer-size: see docs/slim.md
// for the pulls it was measured on.
const DefaultMaxLayerSize = "512MiB"

// MaxOutputLayers bounds how many layers a MaxLayerSize split may produce:
// overlayfs stacks at most ~128 lower directories and Docker refuses images
// of more than 125 layers, so a cap that small is a mistake to report, not
// an image to write.
const MaxOutputLayers = 100

// tarBlock is the tar record size: every entry costs a header block and
// its content rounded up to whole blocks.
const tarBlock = 512

func tarBytes(size int64) int64 {
	return tarBlock + (size+tarBlock-1)/tarBlock*tarBlock
}

// splitGroups assigns every node of v to an output layer. Each group
// (bucket: os, cuda, python, app) becomes one layer, or, when maxSize > 0
// and the group's tar would be larger, several consecutive layers of at
// most maxSize bytes each (one file larger than maxSize gets a layer of its
// own: files are never cut). Files are packed in path order (the view's
// sorted walk), greedily, so the split depends only on the group's own
// paths and sizes: the same input splits the same way, and a change in one
// group never moves a file of another (an app change leaves every CUDA and
// Python layer as it was).
//
// A hardlink whose target stays in the same group goes to its target's
// layer, so the link is kept rather than materialized; a directory goes to
// the lowest layer of what it holds (or of its own group), so it exists
// before anything is written into it, as without a split.
//
// It returns each node's output layer index and the layers' names in
// stacking order. Groups with nothing in them keep an index but no layer
// is written for them.
func splitGroups(v *view, group map[*vnode]int, state map[*rec]uint8, maxSize int64) (map[*vnode]int, []string, error) {
	var chunk [numBuckets]int // current layer within each group
	var fill [numBuckets]int64
	within := map[*vnode]int{}
	sameGroupLink := func(n *vnode) *vnode {
		r := n.Value()
		if r.kind != kHardlink || r.linkTo == nil || state[r] != opEmit {
			return nil
		}
		t := r.linkTo
		tn := v.Lookup(t.path)
		if tn != nil && tn.Value() == t && state[t] == opEmit && t.kind == kFile && group[tn] == group[n] {
			return tn
		}
		return nil
	}
	var links []*vnode
	v.Root().Walk(func(n *vnode) {
		r := n.Value()
		if n.IsDir() || r == nil || n == v.Root() {
			return
		}
		g := group[n]
		var size int64
		switch state[r] {
		case opSkip, opDivert:
			return
		case opEmit:
			if r.kind == kFile {
				size = r.size
			} else if r.kind == kHardlink && r.linkTo != nil {
				if sameGroupLink(n) != nil {
					links = append(links, n)
					return
				}
				size = r.linkTo.size // written as a file (materialized)
			}
		}
		sz := tarBytes(size)
		if maxSize > 0 && fill[g] > 0 && fill[g]+sz > maxSize {
			chunk[g]++
			fill[g] = 0
		}
		fill[g] += sz
		within[n] = chunk[g]
	})
	var offset [numBuckets]int
	var names []string
	for g := range numBuckets {
		offset[g] = len(names)
		if chunk[g] == 0 {
			names = append(names, bucketNames[g])
			continue
		}
		for i := range chunk[g] + 1 {
			names = append(names, fmt.Sprintf("%s-%d", bucketNames[g], i+1))
		}
	}
	if n := len(names); n > MaxOutputLayers {
		return nil, nil, fmt.Errorf("max layer size %s splits the image into %d layers, more than the %d runtimes stack safely: raise it", bytesize.Format(maxSize), n, MaxOutputLayers)
	}
	out := make(map[*vnode]int, len(group))
	for n, c := range within {
		out[n] = offset[group[n]] + c
	}
	for _, n := range links {
		out[n] = out[sameGroupLink(n)]
	}
	var place func(n *vnode) int
	place = func(n *vnode) int {
		if !n.IsDir() {
			o, ok := out[n]
			if !ok {
				// Dropped: it only pulls its directory down to its group,
				// as it did before splitting.
				o = offset[group[n]]
			}
			out[n] = o
			return o
		}
		// group[n] of a directory is already the lowest group below it.
		b := offset[group[n]] + chunk[group[n]]
		cs := n.Children()
		for _, c := range cs {
			b = min(b, place(c))
		}
		if len(cs) == 0 {
			b = offset[group[n]]
		}
		out[n] = b
		return b
	}
	place(v.Root())
	return out, names, nil
}
