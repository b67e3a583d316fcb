package analyze

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/analyze/classify"
)

// The changes Diff names, per file.
const (
	ChangeAdded   = "added"   // only in the image
	ChangeRemoved = "removed" // only in the baseline
	ChangeGrown   = "grown"   // in both, larger now
	ChangeShrunk  = "shrunk"  // in both, smaller now
	// ChangeRewritten is a file of the same size that the image's layers
	// ship again: its copy comes from a layer whose content the
	// baseline's copy did not come from (its bytes may or may not differ).
	ChangeRewritten = "rewritten"
	ChangeUnchanged = "unchanged" // same size, from the same layer content
)

// ClassOtherName is the name a DiffReport gives files of no class.
const ClassOtherName = "other"

// DiffReport is what changed from a baseline image (kiln analyze
// --against OTHER) to an image (IMAGE): sizes, the bytes to pull, layers,
// classes and files. Files are matched by their path in each final
// filesystem (after whiteouts and opaque directories). It is the
// "against" object of kiln analyze --json (docs/analyze-json.md).
type DiffReport struct {
	Before DiffSide `json:"before"`
	After  DiffSide `json:"after"`
	// PullBytes is what a host that has the baseline pulls to get the
	// image: the compressed size of the image's layers the baseline lacks.
	PullBytes int64 `json:"pull_bytes"`
	// SharedLayers counts the image's layers the baseline has too (same
	// blob digest; the same diff ID where either lacks a blob digest).
	SharedLayers int `json:"shared_layers"`
	// AddedLayers are the image's layers the baseline lacks (what is
	// pulled), RemovedLayers the baseline's that the image lacks.
	AddedLayers   []LayerReport `json:"added_layers"`
	RemovedLayers []LayerReport `json:"removed_layers"`
	// Changes counts files and bytes per change (added, removed, grown,
	// shrunk, rewritten, unchanged).
	Changes map[string]ChangeSum `json:"changes"`
	// Classes are the classes whose files changed, largest net change
	// first.
	Classes []ClassChange `json:"classes"`
	// Added, Removed, Grown and Shrunk list the largest such files (the
	// top-N bound), by bytes changed.
	Added   []FileChange `json:"added"`
	Removed []FileChange `json:"removed"`
	Grown   []FileChange `json:"grown"`
	Shrunk  []FileChange `json:"shrunk"`

	// after is every file of the image's final filesystem with its
	// change, in path order (Change, ChangeUnder).
	after []FileChange
}

// DiffSide sizes one of the two images.
type DiffSide struct {
	Image            string `json:"image"`
	Digest           string `json:"digest"`
	Platform         string `json:"platform"`
	CompressedSize   int64  `json:"compressed_size"`
	UncompressedSize int64  `json:"uncompressed_size"`
	VisibleSize      int64  `json:"visible_size"`
	FileCount        int    `json:"file_count"`
	LayerCount       int    `json:"layer_count"`
}

// ChangeSum totals one kind of change. Bytes are positive: added and
// rewritten count the files' sizes now, removed their sizes before, grown
// and shrunk the bytes by which they grew or shrank.
type ChangeSum struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// ClassChange is one class's visible bytes before and after. A file that
// changed class (weights sniffed by content) counts as removed from its
// old class and added to its new one.
type ClassChange struct {
	Class       string `json:"class"` // a classify.Class, or "other"
	BeforeBytes int64  `json:"before_bytes"`
	AfterBytes  int64  `json:"after_bytes"`
	// Delta is AfterBytes - BeforeBytes: AddedBytes - RemovedBytes +
	// ChangedBytes.
	Delta        int64 `json:"delta"`
	AddedFiles   int   `json:"added_files"`
	AddedBytes   int64 `json:"added_bytes"`
	RemovedFiles int   `json:"removed_files"`
	RemovedBytes int64 `json:"removed_bytes"`
	// ChangedFiles grew or shrank; ChangedBytes is their net change.
	ChangedFiles int   `json:"changed_files"`
	ChangedBytes int64 `json:"changed_bytes"`
}

// FileChange is one path's change. A side the path is not on has a null
// layer and a size of 0.
type FileChange struct {
	Path       string         `json:"path"`
	Change     string         `json:"change"`
	Class      classify.Class `json:"class,omitempty"`
	BeforeSize int64          `json:"before_size"`
	AfterSize  int64          `json:"after_size"`
	Delta      int64          `json:"delta"`
	// BeforeLayer and AfterLayer are the layers (indexes in each image)
	// holding the path's visible copy.
	BeforeLayer *int `json:"before_layer"`
	AfterLayer  *int `json:"after_layer"`
}

// DiffChanges lists the changes in display order.
var DiffChanges = []string{ChangeAdded, ChangeRemoved, ChangeGrown, ChangeShrunk, ChangeRewritten, ChangeUnchanged}

// Diff compares two reports of the same analysis, made with Options.Files:
// before is the baseline, after the image. topN bounds each file list
// (10 when ≤ 0). It reads nothing: the layers were read once, by the
// analyses.
func Diff(before, after *Report, topN int) (*DiffReport, error) {
	for _, r := range []*Report{before, after} {
		if r.Files == nil && r.FileCount > 0 {
			return nil, fmt.Errorf("the report of %s has no file list: analyze it with Options.Files", r.Image)
		}
	}
	if topN <= 0 {
		topN = 10
	}
	d := &DiffReport{
		Before: side(before), After: side(after),
		AddedLayers: []LayerReport{}, RemovedLayers: []LayerReport{},
		Changes: map[string]ChangeSum{}, Classes: []ClassChange{},
	}
	for _, c := range DiffChanges {
		d.Changes[c] = ChangeSum{}
	}

	// Layers: a layer is shared when the other image has it; its blob
	// is pulled once however often the image lists it.
	has := func(ls []LayerReport, l LayerReport) bool {
		return slices.ContainsFunc(ls, func(o LayerReport) bool { return sameBlob(o, l) })
	}
	for i, l := range after.Layers {
		switch {
		case has(before.Layers, l):
			d.SharedLayers++
		case has(after.Layers[:i], l): // listed twice: pulled once
		default:
			d.AddedLayers = append(d.AddedLayers, l)
			d.PullBytes += l.CompressedSize
		}
	}
	for i, l := range before.Layers {
		if !has(after.Layers, l) && !has(before.Layers[:i], l) {
			d.RemovedLayers = append(d.RemovedLayers, l)
		}
	}

	// Files: both lists are in path order; walk them side by side.
	classes := map[string]*ClassChange{}
	class := func(c classify.Class) *ClassChange {
		n := ClassName(c)
		if classes[n] == nil {
			classes[n] = &ClassChange{Class: n}
		}
		return classes[n]
	}
	var added, removed, grown, shrunk []FileChange
	layerAt := func(r *Report, i int) LayerReport {
		if i >= 0 && i < len(r.Layers) {
			return r.Layers[i]
		}
		return LayerReport{Index: -1}
	}
	bf, af := sortedFiles(before.Files), sortedFiles(after.Files)
	d.after = make([]FileChange, 0, len(af))
	for i, j := 0, 0; i < len(bf) || j < len(af); {
		var b, a *FileRef
		switch {
		case j == len(af) || i < len(bf) && bf[i].Path < af[j].Path:
			b = &bf[i]
			i++
		case i == len(bf) || af[j].Path < bf[i].Path:
			a = &af[j]
			j++
		default:
			b, a = &bf[i], &af[j]
			i++
			j++
		}
		fc := FileChange{}
		if b != nil {
			fc.Path, fc.Class, fc.BeforeSize, fc.BeforeLayer = b.Path, b.Class, b.Size, ptr(b.Layer)
			class(b.Class).BeforeBytes += b.Size
		}
		if a != nil {
			fc.Path, fc.Class, fc.AfterSize, fc.AfterLayer = a.Path, a.Class, a.Size, ptr(a.Layer)
			class(a.Class).AfterBytes += a.Size
		}
		fc.Delta = fc.AfterSize - fc.BeforeSize
		switch {
		case b == nil:
			fc.Change = ChangeAdded
			added = append(added, fc)
		case a == nil:
			fc.Change = ChangeRemoved
			removed = append(removed, fc)
		case fc.Delta > 0:
			fc.Change = ChangeGrown
			grown = append(grown, fc)
		case fc.Delta < 0:
			fc.Change = ChangeShrunk
			shrunk = append(shrunk, fc)
		case sameContent(layerAt(before, b.Layer), layerAt(after, a.Layer)):
			fc.Change = ChangeUnchanged
		default:
			fc.Change = ChangeRewritten
		}
		sum := d.Changes[fc.Change]
		sum.Files++
		switch fc.Change {
		case ChangeRemoved:
			sum.Bytes += fc.BeforeSize
		case ChangeGrown, ChangeShrunk:
			sum.Bytes += max(fc.Delta, -fc.Delta)
		default:
			sum.Bytes += fc.AfterSize
		}
		d.Changes[fc.Change] = sum
		// Per class: a file that changed class leaves the old one and
		// joins the new.
		switch {
		case b == nil || a != nil && b.Class != a.Class:
			c := class(a.Class)
			c.AddedFiles++
			c.AddedBytes += a.Size
			if b != nil {
				c := class(b.Class)
				c.RemovedFiles++
				c.RemovedBytes += b.Size
			}
		case a == nil:
			c := class(b.Class)
			c.RemovedFiles++
			c.RemovedBytes += b.Size
		case fc.Delta != 0:
			c := class(a.Class)
			c.ChangedFiles++
			c.ChangedBytes += fc.Delta
		}
		if a != nil {
			d.after = append(d.after, fc)
		}
	}
	for _, c := range classes {
		c.Delta = c.AfterBytes - c.BeforeBytes
		if c.AddedFiles+c.RemovedFiles+c.ChangedFiles > 0 {
			d.Classes = append(d.Classes, *c)
		}
	}
	slices.SortFunc(d.Classes, func(x, y ClassChange) int {
		return cmp.Or(cmp.Compare(abs(y.Delta), abs(x.Delta)), cmp.Compare(y.AddedBytes+y.RemovedBytes, x.AddedBytes+x.RemovedBytes), strings.Compare(x.Class, y.Class))
	})
	d.Added, d.Removed, d.Grown, d.Shrunk = topChanges(added, topN), topChanges(removed, topN), topChanges(grown, topN), topChanges(shrunk, topN)
	return d, nil
}

// ClassName is a class's name in a diff: its value, or "other".
func ClassName(c classify.Class) string {
	if c == classify.ClassOther {
		return ClassOtherName
	}
	return string(c)
}

func side(r *Report) DiffSide {
	return DiffSide{Image: r.Image, Digest: r.Digest, Platform: r.Platform, CompressedSize: r.CompressedSize,
		UncompressedSize: r.UncompressedSize, VisibleSize: r.VisibleSize, FileCount: r.FileCount, LayerCount: len(r.Layers)}
}

// sameBlob says whether a pull of b is saved by having a: the same blob
// digest, or where either has none (a docker archive's compressed
// layers, a daemon's) the same diff ID.
func sameBlob(a, b LayerReport) bool {
	if a.Digest != "" && b.Digest != "" {
		return a.Digest == b.Digest
	}
	return a.DiffID != "" && a.DiffID == b.DiffID
}

// sameContent says whether two layers hold the same tar stream: the same
// diff ID (a layer compressed again is the same content), or the same blob.
func sameContent(a, b LayerReport) bool {
	if a.DiffID != "" && b.DiffID != "" {
		return a.DiffID == b.DiffID
	}
	return a.Digest != "" && a.Digest == b.Digest
}

// sortedFiles returns fs in path order (Report.Files already is; a report
// made by hand may not be).
func sortedFiles(fs []FileRef) []FileRef {
	if slices.IsSortedFunc(fs, func(a, b FileRef) int { return strings.Compare(a.Path, b.Path) }) {
		return fs
	}
	fs = slices.Clone(fs)
	slices.SortStableFunc(fs, func(a, b FileRef) int { return strings.Compare(a.Path, b.Path) })
	return fs
}

func topChanges(fs []FileChange, n int) []FileChange {
	slices.SortStableFunc(fs, func(a, b FileChange) int {
		return cmp.Or(cmp.Compare(abs(b.Delta), abs(a.Delta)), strings.Compare(a.Path, b.Path))
	})
	return headN(fs, n)
}

func abs(n int64) int64 { return max(n, -n) }

func ptr(i int) *int { return &i }

// Change is the change of the image's file at path p (absolute), "" when
// the image has no file there.
func (d *DiffReport) Change(p string) string {
	i, ok := slices.BinarySearchFunc(d.after, p, func(f FileChange, p string) int { return strings.Compare(f.Path, p) })
	if !ok {
		return ""
	}
	return d.after[i].Change
}

// ChangeUnder is the change holding most of the image's bytes below the
// directory dir (absolute; "/" for all), "" when it holds no file.
func (d *DiffReport) ChangeUnder(dir string) string {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	i, _ := slices.BinarySearchFunc(d.after, prefix, func(f FileChange, p string) int { return strings.Compare(f.Path, p) })
	by := map[string]int64{}
	for ; i < len(d.after) && strings.HasPrefix(d.after[i].Path, prefix); i++ {
		by[d.after[i].Change] += d.after[i].AfterSize + 1 // empty files count a little
	}
	best, bestN := "", int64(0)
	for _, c := range DiffChanges {
		if by[c] > bestN {
			best, bestN = c, by[c]
		}
	}
	return best
}
