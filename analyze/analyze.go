package analyze

import (
	"archive/tar"
	"cmp"
	"context"
	"fmt"
	"io"
	"path"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/internal/parallel"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/overlay"
)

// copyRec is one copy of a file as some layer wrote it: the value of its
// node in the squashed tree (directories have none).
type copyRec struct {
	path    string
	layer   int
	size    int64
	class   classify.Class
	format  string       // weights format, when sniffed
	kernels *kernelArchs // device code, when scanned and found
	deleted bool         // a later layer (or a later entry) removed or replaced it
}

// Options tunes an analysis.
type Options struct {
	// Concurrency is how many layers are read at once (default: CPUs, at
	// most 4: decompression is CPU-bound and more readers only thrash).
	Concurrency int
	// SkipVerify trusts local blobs without hashing them.
	SkipVerify bool
	// TopN bounds the top-file lists (default 10).
	TopN int
	// Progress, when set, advances by stored bytes read.
	Progress *atomic.Int64
	// LayerProgress, when set, is asked as each layer's read starts for
	// the counter its stored bytes advance instead of Progress (a
	// display's bar for that layer); nil keeps Progress.
	LayerProgress func(l *layers.Layer) *atomic.Int64
	// Kernels scans shared libraries for device code (cubins, PTX) and
	// reports the GPU architectures they cover. It reads every shared
	// library's bytes, so it is opt-in.
	Kernels bool
	// GPUs are target GPUs to check kernel coverage for (implies Kernels).
	GPUs []cuda.GPUInfo
	// Tree, when set, fills Report.Tree: the squashed filesystem for a
	// treemap, bounded to TreeNodes nodes (default DefaultTreeNodes).
	Tree      bool
	TreeNodes int
	// Files, when set, fills Report.Files: every non-directory entry of
	// the final filesystem, what Diff compares two reports by.
	Files bool
}

// entry kinds kept per layer.
const (
	kFile = iota
	kDir
	kLink    // hard links, devices: no content bytes
	kSymlink // no content bytes either, but paths below it lead elsewhere
	kWhiteout
	kOpaque
)

type scanEntry struct {
	path    string
	link    string // a symlink's target
	size    int64
	kind    uint8
	class   classify.Class
	format  string
	kernels *kernelArchs
}

type layerScan struct {
	entries  []scanEntry
	stats    layers.LayerStats
	cudnn    string
	cudart   string
	warnings []string
}

// Image analyzes img.
func Image(ctx context.Context, img *layers.Image, opt Options) (*Report, error) {
	if err := img.CheckTarLayers("analyze"); err != nil {
		return nil, fmt.Errorf("image %q: %w", img.Ref.Raw, err)
	}
	if opt.Concurrency <= 0 {
		opt.Concurrency = min(runtime.GOMAXPROCS(0), 4)
	}
	if opt.TopN <= 0 {
		opt.TopN = 10
	}
	if len(opt.GPUs) > 0 {
		opt.Kernels = true
	}
	scans := make([]*layerScan, len(img.Layers))
	err := parallel.ForEach(ctx, len(img.Layers), opt.Concurrency, func(ctx context.Context, i int) error {
		s, err := scanLayer(ctx, img.Layers[i], opt)
		if err != nil {
			return fmt.Errorf("image %q: %w", img.Ref.Raw, err)
		}
		scans[i] = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	return merge(img, scans, opt), nil
}

var cudnnDefineRe = regexp.MustCompile(`#define\s+CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)`)

func scanLayer(ctx context.Context, l *layers.Layer, opt Options) (*layerScan, error) {
	s := &layerScan{}
	head := make([]byte, classify.SniffLen)
	progress := opt.Progress
	if opt.LayerProgress != nil {
		progress = cmp.Or(opt.LayerProgress(l), progress)
	}
	st, err := l.Walk(ctx, layers.WalkOptions{SkipVerify: opt.SkipVerify, Progress: progress}, func(e *layers.Entry, body io.Reader) error {
		// What tar readers disagree on has no one report; an entry that
		// leaves the root is counted where a runtime puts it.
		if err := layers.CheckForm(e); err != nil {
			return err
		}
		if e.Escapes {
			s.warnings = append(s.warnings, fmt.Sprintf("layer %d: entry %q points outside the image root; counted as /%s", l.Index, e.Header.Name, e.Path))
		}
		se := scanEntry{path: e.Path}
		switch {
		case e.Opaque:
			se.kind = kOpaque
		case e.Whiteout:
			se.kind = kWhiteout
		case e.Header.Typeflag == '5':
			se.kind = kDir
		case e.IsRegular():
			se.kind = kFile
			se.size = e.Header.Size
			se.class = classify.ClassifyPath(e.Path)
			base := path.Base(e.Path)
			if classify.WeightCandidate(e.Path, se.size) {
				n, _ := io.ReadFull(body, head)
				if f := classify.SniffWeights(e.Path, head[:n], se.size); f != "" {
					se.class, se.format = classify.ClassWeights, f
				}
			}
			if strings.HasPrefix(base, "cudnn_version") && strings.HasSuffix(base, ".h") && se.size < 1<<20 {
				if v := readCuDNNHeader(body); v != "" {
					s.cudnn = v
				}
			}
			if strings.HasPrefix(base, "libcudart.so.") && strings.Count(base, ".") >= 4 {
				s.cudart = strings.TrimPrefix(base, "libcudart.so.")
			}
			if opt.Kernels && se.size > 1024 && isSharedObject(e.Path) {
				k, err := scanFatbins(body)
				if err != nil {
					return fmt.Errorf("reading %s: %w", e.Path, err)
				}
				if !k.empty() {
					se.kernels = k
				}
			}
		case e.Header.Typeflag == tar.TypeSymlink:
			se.kind, se.link = kSymlink, e.Header.Linkname
		default:
			se.kind = kLink
		}
		if se.path == "" && se.kind != kOpaque {
			return nil // the root itself
		}
		s.entries = append(s.entries, se)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.stats = st
	return s, nil
}

func readCuDNNHeader(r io.Reader) string {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return ""
	}
	v := map[string]string{}
	for _, m := range cudnnDefineRe.FindAllSubmatch(b, -1) {
		v[string(m[1])] = string(m[2])
	}
	if v["MAJOR"] == "" {
		return ""
	}
	return v["MAJOR"] + "." + v["MINOR"] + "." + v["PATCHLEVEL"]
}

type effAcc struct {
	cum, min int64
	seen     int
}

// effAdd records one appearance of a path for the efficiency score.
func effAdd(eff map[string]*effAcc, p string, size int64) {
	acc := eff[p]
	if acc == nil {
		acc = &effAcc{min: size}
		eff[p] = acc
	}
	acc.cum += size
	acc.seen++
	acc.min = min(acc.min, size)
}

// merger adds the scanned layers up into one Report.
type merger struct {
	r       *Report
	opt     Options
	t       *overlay.Tree[*copyRec]
	eff     map[string]*effAcc
	classes map[classify.Class]*ClassReport
	wasted  []WastedFile
	all     []*copyRec // every file any layer wrote
	// layerWaste is each layer's bytes a later one hid.
	layerWaste        []int64
	cudnnFile, cudart string
}

// merge adds the layers' scans up, in phases: the layers stacked (what
// each hides is waste), dive's efficiency, the final filesystem (visible
// sizes, duplicate CUDA libraries, GPU code), then the largest files and
// the classes.
func merge(img *layers.Image, scans []*layerScan, opt Options) *Report {
	m := &merger{
		r: &Report{
			SchemaVersion:  SchemaVersion,
			Image:          img.Ref.Raw,
			Source:         string(img.Ref.Kind),
			Mirror:         img.Mirror,
			Digest:         img.Digest.String(),
			Platform:       layers.PlatformString(img.Platform),
			CompressedSize: img.CompressedSize(),
			Verified:       true,
			Warnings:       []string{},
		},
		opt: opt, t: overlay.New[*copyRec](), eff: map[string]*effAcc{}, classes: map[classify.Class]*ClassReport{},
		layerWaste: make([]int64, len(scans)),
	}
	for _, c := range classify.AllClasses {
		m.classes[c] = &ClassReport{Class: c, DevOnly: c.DevOnly(), Fix: c.Fix(), Top: []FileRef{}}
	}
	for i, s := range scans {
		m.layer(img, i, s)
	}
	r := m.r
	for i := range r.Layers {
		r.Layers[i].WastedBytes = m.layerWaste[i]
	}
	m.efficiency()
	compat := m.final()
	m.largest()
	var cw []string
	r.CUDA, cw = cudaFacts(img, m.cudnnFile, m.cudart)
	sort.Strings(compat)
	r.CUDA.CompatLibs = compat
	if opt.Tree {
		r.Tree = squashedTree(m.t, opt.TreeNodes)
	}
	r.Warnings = append(r.Warnings, cw...)
	for i := range r.Waste.Top {
		r.Waste.Top[i].Path = "/" + r.Waste.Top[i].Path
	}
	return r
}

// hide is the tree's gone callback for layer by's entries: what they
// hide is wasted (how), and its size adds up in *sum.
func (m *merger) hide(by int, how string, sum *int64) func(*copyRec) {
	return func(g *copyRec) {
		if g == nil {
			return // a directory: the files below it come one by one
		}
		*sum += g.size
		g.deleted = true
		if g.size == 0 {
			return
		}
		m.layerWaste[g.layer] += g.size
		m.r.Waste.WastedBytes += g.size
		h := how
		if how == "overwritten" && g.layer == by {
			h = "duplicate"
		}
		m.wasted = append(m.wasted, WastedFile{Path: g.path, Size: g.size, Layer: g.layer, By: by, How: h})
	}
}

// layer stacks layer i (scan s) on the tree: its report, its whiteouts
// and opaque markers, then its own entries.
func (m *merger) layer(img *layers.Image, i int, s *layerScan) {
	r, t, eff, classes, hide := m.r, m.t, m.eff, m.classes, m.hide
	l := img.Layers[i]
	lr := LayerReport{
		Index: i, Digest: l.Digest.String(), DiffID: l.DiffID.String(), MediaType: string(l.MediaType),
		Compression: string(s.stats.Compression), CompressedSize: l.Size, UncompressedSize: s.stats.UncompressedSize,
		CreatedBy: l.CreatedBy, BytesByClass: map[string]int64{},
	}
	if l.Digest.Hex == "" {
		lr.Digest = ""
	}
	r.UncompressedSize += s.stats.UncompressedSize
	r.Verified = r.Verified && s.stats.Verified
	r.Warnings = append(r.Warnings, s.warnings...)
	if s.cudnn != "" {
		m.cudnnFile = s.cudnn
	}
	if s.cudart != "" {
		m.cudart = s.cudart
	}
	// Whiteouts and opaque markers apply to lower layers only, so
	// apply them before this layer's own files.
	for _, e := range s.entries {
		var n int64
		switch e.kind {
		case kWhiteout:
			// dive's accounting: a deleted directory counts the
			// size of its subtree, a deleted file counts 0, and
			// either way the path's smallest copy becomes that.
			if !t.Whiteout(e.path, hide(i, "deleted", &n)) {
				n = 0
			}
			effAdd(eff, e.path, n)
		case kOpaque:
			// dive does not understand opaque markers; kiln scores
			// them like a whiteout of the directory's old contents.
			t.Opaque(e.path, hide(i, "hidden", &n))
			effAdd(eff, e.path, n)
		}
	}
	var overwritten int64
	over := hide(i, "overwritten", &overwritten)
	links := linkedWrites{layer: i}
	place := func(e *scanEntry, k overlay.Kind, c *copyRec) { links.add(t, e, k, c, over) }
	for j := range s.entries {
		e := &s.entries[j]
		switch e.kind {
		case kDir:
			place(e, overlay.Dir, nil)
		case kFile, kLink, kSymlink:
			lr.FileCount++
			c := &copyRec{path: e.path, layer: i, size: e.size, class: e.class, format: e.format, kernels: e.kernels}
			k := overlay.File
			if e.kind == kSymlink {
				k = overlay.Symlink
			}
			place(e, k, c)
			if e.kind != kFile {
				continue
			}
			m.all = append(m.all, c)
			if e.class != classify.ClassOther {
				lr.BytesByClass[string(e.class)] += e.size
				cr := classes[e.class]
				cr.Bytes += e.size
				cr.Files++
			}
			effAdd(eff, e.path, e.size)
		}
	}
	r.Warnings = append(r.Warnings, links.warnings()...)
	r.Layers = append(r.Layers, lr)
}

// efficiency scores the layers as dive does, and ranks the waste.
func (m *merger) efficiency() {
	r := m.r
	var sumMin, sumCum int64
	for _, a := range m.eff {
		sumMin += a.min
		sumCum += a.cum
		if a.seen > 1 {
			r.Waste.DiveWastedBytes += a.cum
		}
	}
	r.Waste.Efficiency = 1
	if sumCum > 0 {
		r.Waste.Efficiency = float64(sumMin) / float64(sumCum)
	}
	sort.SliceStable(m.wasted, func(a, b int) bool {
		if m.wasted[a].Size != m.wasted[b].Size {
			return m.wasted[a].Size > m.wasted[b].Size
		}
		return m.wasted[a].Path < m.wasted[b].Path
	})
	r.Waste.Top = headN(m.wasted, m.opt.TopN)
}

// final reads the final filesystem: visible sizes, duplicate CUDA
// libraries, GPU code; it returns the CUDA compat libraries found.
func (m *merger) final() (compat []string) {
	r := m.r
	bySoname := map[string][]*copyRec{}
	var withKernels []*copyRec
	m.t.Root().Range(func(n *overlay.Node[*copyRec]) {
		c := n.Value()
		if c == nil {
			return // a directory
		}
		if c.kernels != nil {
			withKernels = append(withKernels, c)
		}
		if IsCompatLib(c.path) {
			compat = append(compat, "/"+c.path)
		}
		r.VisibleSize += c.size
		r.FileCount++
		if m.opt.Files {
			r.Files = append(r.Files, FileRef{Path: "/" + c.path, Size: c.size, Layer: c.layer, Class: c.class, Format: c.format})
		}
		if c.class != classify.ClassOther {
			m.classes[c.class].VisibleBytes += c.size
		}
		if c.class == classify.ClassCUDALibs && c.size > 0 {
			so := classify.Soname(path.Base(c.path))
			bySoname[so] = append(bySoname[so], c)
		}
	})
	slices.SortFunc(r.Files, func(a, b FileRef) int { return strings.Compare(a.Path, b.Path) })
	r.DuplicateCUDALibs = duplicateLibs(bySoname)
	if m.opt.Kernels {
		sort.Slice(withKernels, func(a, b int) bool { return withKernels[a].path < withKernels[b].path })
		libs := []KernelLib{}
		var archs []*kernelArchs
		for _, c := range withKernels {
			libs = append(libs, KernelLib{Path: "/" + c.path, Layer: c.layer, SM: archNames(c.kernels.sm, "sm_"), PTX: archNames(c.kernels.ptx, "compute_")})
			archs = append(archs, c.kernels)
		}
		r.Kernels = kernelReport(libs, archs, m.opt.GPUs)
	}
	return compat
}

// largest ranks the files any layer wrote: overall and per class.
func (m *merger) largest() {
	r := m.r
	ref := func(c *copyRec) FileRef {
		return FileRef{Path: "/" + c.path, Size: c.size, Layer: c.layer, Class: c.class, Format: c.format, Deleted: c.deleted}
	}
	all := m.all
	sort.SliceStable(all, func(a, b int) bool { return all[a].size > all[b].size })
	for _, c := range all {
		if c.class != classify.ClassOther {
			if cr := m.classes[c.class]; len(cr.Top) < m.opt.TopN {
				cr.Top = append(cr.Top, ref(c))
			}
		}
	}
	for _, c := range all[:min(len(all), m.opt.TopN)] {
		r.LargestFiles = append(r.LargestFiles, ref(c))
	}
	if r.LargestFiles == nil {
		r.LargestFiles = []FileRef{}
	}
	for _, c := range classify.AllClasses {
		r.Classes = append(r.Classes, *m.classes[c])
	}
}

// IsCompatLib says whether p (relative to the image root) is one of the
// cuda-compat package's driver libraries: libcuda.so* in a compat
// directory of a CUDA toolkit (/usr/local/cuda/compat,
// /usr/local/cuda-12.8/compat).
func IsCompatLib(p string) bool {
	p = strings.TrimPrefix(p, "/")
	dir, base := path.Split(p)
	return strings.HasPrefix(base, "libcuda.so") && strings.HasPrefix(dir, "usr/local/cuda") && strings.HasSuffix(dir, "/compat/")
}

func headN[T any](s []T, n int) []T {
	if len(s) > n {
		s = s[:n]
	}
	if s == nil {
		s = []T{}
	}
	return s
}

func inPythonPackage(p string) bool {
	return strings.Contains(p, "site-packages/") || strings.Contains(p, "dist-packages/")
}

func duplicateLibs(bySoname map[string][]*copyRec) []DuplicateLib {
	out := []DuplicateLib{}
	for so, cs := range bySoname {
		var sys, py bool
		for _, c := range cs {
			if inPythonPackage(c.path) {
				py = true
			} else {
				sys = true
			}
		}
		// Two system copies of one SONAME are usually versioned twins
		// (libfoo.so.11 and libfoo.so.11.8.89 both regular files) and
		// two wheel copies live in separate venvs; the waste users hit is
		// a system CUDA plus a wheel-bundled one.
		if !(sys && py) {
			continue
		}
		d := DuplicateLib{Soname: so}
		var total, largest int64
		sort.Slice(cs, func(a, b int) bool { return cs[a].path < cs[b].path })
		for _, c := range cs {
			d.Copies = append(d.Copies, FileRef{Path: "/" + c.path, Size: c.size, Layer: c.layer, Class: c.class})
			total += c.size
			largest = max(largest, c.size)
		}
		d.WastedBytes = total - largest
		out = append(out, d)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].WastedBytes != out[b].WastedBytes {
			return out[a].WastedBytes > out[b].WastedBytes
		}
		return out[a].Soname < out[b].Soname
	})
	return out
}
