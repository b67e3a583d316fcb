package slim

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/sign"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/layers"
)

// ReportSchemaVersion is bumped when a field of Report changes meaning.
const ReportSchemaVersion = 1

// Report is the before/after account of a slim. Bytes are uncompressed file
// contents unless a field says compressed.
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	Source        string `json:"source"`
	SourceDigest  string `json:"source_digest"`
	Policy        string `json:"policy"`
	PolicySummary string `json:"policy_summary"`
	Level         int    `json:"zstd_level"`
	// Digest is the slim image's manifest digest in its first encoding,
	// ImageID its config digest (the same in every encoding: what docker
	// images shows), and Images where each encoding was written (set by
	// the caller that writes them).
	Digest  string      `json:"digest,omitempty"`
	ImageID string      `json:"image_id,omitempty"`
	Images  []Published `json:"images,omitempty"`
	// StartupFiles is how many files the recording probe saw the
	// application open: the eStargz layers' prioritized set (0 without
	// --format estargz --probe).
	StartupFiles int `json:"startup_files,omitempty"`
	// StartupInImage is how many of them the eStargz layers hold and
	// place first: the rest are files the probe created (Python's
	// bytecode cache when the image has none) or that are on no layer.
	StartupInImage int `json:"startup_files_in_image,omitempty"`
	// MaxLayerSize is the cap layers were split at (0: none).
	MaxLayerSize int64 `json:"max_layer_size"`

	Before Totals `json:"before"`
	After  Totals `json:"after"`
	// Classes: bytes per class in all source layers (superseded copies
	// included) and in the output.
	Classes []ClassDelta `json:"classes"`
	// SourceLayers and Layers are the input and output layers.
	SourceLayers []SourceLayer `json:"source_layers"`
	Layers       []OutLayer    `json:"layers"`
	// Removed sums what left the image, by reason.
	Removed []RemovedSum `json:"removed"`
	// TopRemoved are the largest files that left the image.
	TopRemoved []RemovedFile `json:"top_removed"`
	// Kept explains files the policy would have dropped but kept.
	Kept []KeptReason `json:"kept"`
	// Prune accounts for prune_libs (absent when the policy keeps every
	// library).
	Prune *PruneReport `json:"prune,omitempty"`
	// GPUCode accounts for fat-binary pruning (absent without a fleet).
	GPUCode *GPUCodeReport `json:"gpu_code,omitempty"`
	// JIT lists run-time kernel compilers found in the image.
	JIT []JITPackage `json:"jit"`
	// Diverted is the number and size of the files handed to the diverter.
	DivertedFiles int   `json:"diverted_files"`
	DivertedBytes int64 `json:"diverted_bytes"`
	// DivertMount is where a MountDiverter's volume is mounted;
	// DivertedBeside counts the diverted files that are not weights but
	// sat below it (they go into the volume so that the mount hides none).
	DivertMount    string `json:"diverted_mount,omitempty"`
	DivertedBeside int    `json:"diverted_beside,omitempty"`
	// Materialized counts hardlinks written as files because their target
	// left the image or landed in another layer.
	Materialized int      `json:"materialized_hardlinks"`
	Warnings     []string `json:"warnings"`
	// Seconds and MBps measure the rewrite (both passes); MBps is source
	// uncompressed bytes per second.
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
}

// Totals sizes an image.
type Totals struct {
	Files            int   `json:"files"`
	Bytes            int64 `json:"bytes"`
	UncompressedSize int64 `json:"uncompressed_size"`
	CompressedSize   int64 `json:"compressed_size"`
	Layers           int   `json:"layers"`
}

// ClassDelta is one class before and after.
type ClassDelta struct {
	Class       classify.Class `json:"class"`
	BeforeFiles int            `json:"before_files"`
	BeforeBytes int64          `json:"before_bytes"`
	AfterFiles  int            `json:"after_files"`
	AfterBytes  int64          `json:"after_bytes"`
}

// SourceLayer is an input layer.
type SourceLayer struct {
	Index            int    `json:"index"`
	Digest           string `json:"digest"`
	CompressedSize   int64  `json:"compressed_size"`
	UncompressedSize int64  `json:"uncompressed_size"`
	Files            int    `json:"files"`
	Bytes            int64  `json:"bytes"`
	KeptFiles        int    `json:"kept_files"`
	KeptBytes        int64  `json:"kept_bytes"`
	CreatedBy        string `json:"created_by,omitempty"`
}

// OutLayer is an output layer.
type OutLayer struct {
	Name             string `json:"name"`
	Digest           string `json:"digest"`
	DiffID           string `json:"diff_id"`
	CompressedSize   int64  `json:"compressed_size"`
	UncompressedSize int64  `json:"uncompressed_size"`
	Entries          int    `json:"entries"`
	Files            int    `json:"files"`
	Bytes            int64  `json:"bytes"`
	FromLayers       []int  `json:"from_layers"`
	// Blobs are the layer's blobs, one per compression written (Digest
	// and CompressedSize above are the first's).
	Blobs []LayerBlob `json:"blobs"`
}

// Published is one encoding of the slim image, where it was written.
type Published struct {
	Ref         layers.Ref `json:"ref"`
	Compression string     `json:"compression"` // gzip, zstd, estargz or erofs (native EROFS layers); none in a docker archive
	Digest      string     `json:"digest"`
	// Signed is the --sign-key signature stored for Digest.
	Signed *sign.Signed `json:"signed,omitempty"`
	// Index is what Ref names with --sbom: an index of the image (Digest)
	// and SBOM, the attestation manifest holding its CycloneDX BOM.
	Index string `json:"index,omitempty"`
	SBOM  string `json:"sbom,omitempty"`
}

// LayerBlob is one encoding of an output layer.
type LayerBlob struct {
	Compression    string `json:"compression"`
	Digest         string `json:"digest"`
	CompressedSize int64  `json:"compressed_size"`
	// An eStargz blob's own tar (see Result.AddEStargz): its diff ID, and
	// how many of the startup files it places before its landmark.
	DiffID       string `json:"diff_id,omitempty"`
	StartupFiles int    `json:"startup_files,omitempty"`
}

// RemovedSum totals one removal reason.
type RemovedSum struct {
	Why   string `json:"why"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
}

// RemovedFile is one file that left the image.
type RemovedFile struct {
	Path  string         `json:"path"`
	Bytes int64          `json:"bytes"`
	Layer int            `json:"layer"`
	Class classify.Class `json:"class,omitempty"`
	Why   string         `json:"why"`
	kind  uint8
}

// KeptReason says why something the policy targets stayed.
type KeptReason struct {
	Path   string `json:"path,omitempty"`
	Class  string `json:"class,omitempty"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	Reason string `json:"reason"`
}

// JITPackage is a package that compiles kernels at run time.
type JITPackage struct {
	Package string `json:"package"`
	What    string `json:"what"`
	Needs   string `json:"needs"`
}

func newReport(img *layers.Image, opt *Options) *Report {
	r := &Report{
		SchemaVersion: ReportSchemaVersion, Source: img.Ref.Raw, SourceDigest: img.Digest.String(),
		Policy: opt.Policy.Name, PolicySummary: opt.Policy.String(), Level: opt.Level, MaxLayerSize: opt.MaxLayerSize,
		Kept: []KeptReason{}, JIT: []JITPackage{}, Warnings: []string{},
	}
	r.Before.CompressedSize = img.CompressedSize()
	r.Before.Layers = len(img.Layers)
	for _, c := range classify.AllClasses {
		r.Classes = append(r.Classes, ClassDelta{Class: c})
	}
	for _, l := range img.Layers {
		d := l.Digest.String()
		if l.Digest.Hex == "" {
			d = l.DiffID.String()
		}
		r.SourceLayers = append(r.SourceLayers, SourceLayer{Index: l.Index, Digest: d, CompressedSize: l.Size, CreatedBy: l.CreatedBy})
	}
	return r
}

func (r *Report) class(c classify.Class) *ClassDelta {
	for i := range r.Classes {
		if r.Classes[i].Class == c {
			return &r.Classes[i]
		}
	}
	return nil
}

func (r *Report) before(x *rec) {
	r.Before.Files++
	r.Before.Bytes += x.size
	sl := &r.SourceLayers[x.layer]
	sl.Files++
	sl.Bytes += x.size
	if cd := r.class(x.class); cd != nil {
		cd.BeforeFiles++
		cd.BeforeBytes += x.size
	}
}

func (r *Report) after(x *rec, a *action) {
	size, class := x.size, x.class
	if a.op == opMaterialize {
		size, class = a.src.size, a.src.class
	}
	if a.op != opEmit && a.op != opMaterialize {
		return
	}
	r.After.Files++
	r.After.Bytes += size
	sl := &r.SourceLayers[x.layer]
	sl.KeptFiles++
	sl.KeptBytes += size
	if cd := r.class(class); cd != nil {
		cd.AfterFiles++
		cd.AfterBytes += size
	}
}

func (r *Report) addKept(path, class string, bytes int64, reason string) {
	for i := range r.Kept {
		k := &r.Kept[i]
		if k.Reason == reason && k.Class == class && path == "" {
			k.Files++
			k.Bytes += bytes
			return
		}
	}
	r.Kept = append(r.Kept, KeptReason{Path: path, Class: class, Files: 1, Bytes: bytes, Reason: reason})
}

func (r *Report) keptGlob(x *rec) {
	if x.kind != kFile {
		return
	}
	r.addKept("", string(x.class), x.size, "policy keep glob (licenses and files the policy names)")
}

func (r *Report) keptWeights(x *rec, pol *Policy) {
	if x.kind != kFile {
		return
	}
	why := "weights: policy " + pol.Name + " keeps them"
	if pol.Weights == WeightsDivert {
		why = "weights stay in the image: no weights destination given (--weights-to); the policy would move them out"
	}
	r.Kept = append(r.Kept, KeptReason{Path: "/" + x.path, Class: string(classify.ClassWeights), Files: 1, Bytes: x.size, Reason: why})
}

func (r *Report) keptJIT(x *rec, c classify.Class, hits []*jitHit) {
	if x.kind != kFile {
		return
	}
	r.addKept("", string(c), x.size, "needed by run-time kernel compilers: "+jitNames(hits))
}

func (r *Report) finishPlan(removed []RemovedFile) {
	sums := map[string]*RemovedSum{}
	var order []string
	var files []RemovedFile
	for _, f := range removed {
		why := f.Why
		if i := strings.Index(why, " ("); i > 0 {
			why = why[:i]
		}
		if strings.HasPrefix(why, whyGlob+" ") {
			why = whyGlob
		}
		if why == whyClass {
			why = "class " + string(f.Class)
		}
		s := sums[why]
		if s == nil {
			s = &RemovedSum{Why: why}
			sums[why] = s
			order = append(order, why)
		}
		if f.kind == kFile || f.kind == kHardlink && f.Bytes > 0 {
			s.Files++
			s.Bytes += f.Bytes
			files = append(files, f)
		} else {
			s.Files++
		}
		if f.Why == whyDiverted && f.kind == kFile {
			r.DivertedFiles++
			r.DivertedBytes += f.Bytes
		}
	}
	sort.Strings(order)
	for _, w := range order {
		r.Removed = append(r.Removed, *sums[w])
	}
	sort.SliceStable(r.Removed, func(a, b int) bool { return r.Removed[a].Bytes > r.Removed[b].Bytes })
	sort.SliceStable(files, func(a, b int) bool {
		if files[a].Bytes != files[b].Bytes {
			return files[a].Bytes > files[b].Bytes
		}
		return files[a].Path < files[b].Path
	})
	r.TopRemoved = files[:min(len(files), 15)]
	if r.TopRemoved == nil {
		r.TopRemoved = []RemovedFile{}
	}
	if r.Removed == nil {
		r.Removed = []RemovedSum{}
	}
}

// Ratio is the compressed size before over after (how many times smaller
// a pull gets), counting diverted weights as gone.
func (r *Report) Ratio() float64 {
	if r.After.CompressedSize == 0 {
		return 0
	}
	return float64(r.Before.CompressedSize) / float64(r.After.CompressedSize)
}

// WriteTable prints the report for humans, fitted to the width in opts
// (80 columns by default: paths cut in the middle, prose wrapped; --json
// keeps every value whole), with size bars in the layer table.
func (r *Report) WriteTable(w io.Writer, opts ...termtable.Option) error {
	o := termtable.Resolve(opts...)
	row := func(first, s string) { termtable.Fprintw(w, o.Width, first, "    ", s) }
	row("slim ", fmt.Sprintf("%s (policy %s: %s)", r.Source, r.Policy, strings.ReplaceAll(r.PolicySummary, ",", ", ")))
	fmt.Fprintln(w)
	right := func(h string) termtable.Column { return termtable.Column{Head: h, Right: true} }
	t := termtable.New(o, termtable.Column{}, right("BEFORE"), right("AFTER"), right("SAVED"))
	t.Row("compressed (pull)", bytesize.Format(r.Before.CompressedSize), bytesize.Format(r.After.CompressedSize), fmt.Sprintf("%.2fx smaller", r.Ratio()))
	t.Row("uncompressed", bytesize.Format(r.Before.UncompressedSize), bytesize.Format(r.After.UncompressedSize), bytesize.Format(r.Before.UncompressedSize-r.After.UncompressedSize))
	t.Row("files", fmt.Sprint(r.Before.Files), fmt.Sprint(r.After.Files), fmt.Sprint(r.Before.Files-r.After.Files))
	t.Row("layers", fmt.Sprint(r.Before.Layers), fmt.Sprint(r.After.Layers))
	if err := t.Write(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = termtable.New(o, termtable.Column{Head: "CLASS"}, right("BEFORE"), right("AFTER"), right("REMOVED"))
	for _, c := range r.Classes {
		t.Row(string(c.Class), fmt.Sprintf("%s (%d)", bytesize.Format(c.BeforeBytes), c.BeforeFiles), fmt.Sprintf("%s (%d)", bytesize.Format(c.AfterBytes), c.AfterFiles), bytesize.Format(c.BeforeBytes-c.AfterBytes))
	}
	if err := t.Write(w); err != nil {
		return err
	}
	if len(r.Removed) > 0 {
		fmt.Fprintln(w)
		t = termtable.New(o, termtable.Column{Head: "REMOVED", Shrink: true, ShrinkEnd: true, Min: 20}, right("FILES"), right("BYTES"))
		for _, s := range r.Removed {
			t.Row(s.Why, fmt.Sprint(s.Files), bytesize.Format(s.Bytes))
		}
		if err := t.Write(w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	var largest int64
	for _, l := range r.Layers {
		largest = max(largest, l.CompressedSize)
	}
	t = termtable.New(o, termtable.Column{Head: "LAYER", Shrink: true, Min: 10}, right("SIZE"), termtable.Column{}, right("UNPACKED"), right("FILES"),
		termtable.Column{Head: "FROM", Shrink: true, ShrinkEnd: true, Min: 8})
	for _, l := range r.Layers {
		bar := ""
		if largest > 0 {
			bar = termtable.Bar(float64(l.CompressedSize)/float64(largest), 8)
		}
		t.Row(l.Name, bytesize.Format(l.CompressedSize), bar, bytesize.Format(l.UncompressedSize), fmt.Sprint(l.Files), fmt.Sprint(l.FromLayers))
	}
	t.Style(func(row, col int, s string) string {
		if row >= 0 && col == 2 {
			return termtable.Paint(true, termtable.Cyan, s)
		}
		return s
	})
	if err := t.Write(w); err != nil {
		return err
	}
	// size  path  (note) lines: the path gives way, cut in the middle.
	sized := func(size int64, path, note string) {
		pre := fmt.Sprintf("  %10s  ", bytesize.Format(size))
		room := o.Width - termtable.Len(pre) - termtable.Len(note) - 4
		row(pre, fmt.Sprintf("%s  (%s)", termtable.Middle(path, max(room, 24)), note))
	}
	if len(r.TopRemoved) > 0 {
		fmt.Fprintf(w, "\nlargest removed files:\n")
		for _, f := range r.TopRemoved[:min(len(r.TopRemoved), 8)] {
			sized(f.Bytes, f.Path, fmt.Sprintf("layer %d, %s", f.Layer, f.Why))
		}
	}
	if p := r.Prune; p != nil {
		fmt.Fprintln(w)
		row("", fmt.Sprintf("unreferenced libraries (prune_libs: %s): %d of %d candidate libraries dropped, %s of %s; %d roots; search dirs %s",
			p.Mode, p.DroppedFiles, p.Candidates, bytesize.Format(p.DroppedBytes), bytesize.Format(p.CandidateBytes), p.Roots, strings.Join(p.SearchDirs, " : ")))
		for _, f := range p.Top[:min(len(p.Top), 10)] {
			sized(f.Bytes, f.Path, f.Why)
		}
		if len(p.TopKept) > 0 {
			fmt.Fprintf(w, "  largest kept:\n")
			for _, k := range p.TopKept[:min(len(p.TopKept), 5)] {
				sized(k.Bytes, k.Path, k.Reason)
			}
		}
		if len(p.Unresolved) > 0 {
			var names []string
			for _, u := range p.Unresolved {
				names = append(names, u.Name)
			}
			row("  ", "needed but not in the image (the host may provide them): "+strings.Join(names, ", "))
		}
	}
	if g := r.GPUCode; g != nil {
		fmt.Fprintln(w)
		g.WriteTable(w, opts...)
	}
	for _, j := range r.JIT {
		fmt.Fprintln(w)
		row("", fmt.Sprintf("run-time kernel compiler: %s — %s; needs %s", j.Package, j.What, j.Needs))
	}
	if len(r.Kept) > 0 {
		fmt.Fprintf(w, "\nkept on purpose:\n")
		for _, k := range r.Kept {
			what := k.Path
			if what == "" {
				what = fmt.Sprintf("%d %s files", k.Files, k.Class)
			}
			row(fmt.Sprintf("  %10s  ", bytesize.Format(k.Bytes)), termtable.Middle(what, o.Width/2)+": "+k.Reason)
		}
	}
	if r.DivertedFiles > 0 {
		fmt.Fprintf(w, "\nweights moved out: %d files, %s\n", r.DivertedFiles, bytesize.Format(r.DivertedBytes))
		if r.DivertedBeside > 0 {
			fmt.Fprintf(w, "  %d of them beside the weights: the volume holds all of %s\n", r.DivertedBeside, r.DivertMount)
		}
	}
	for _, wn := range r.Warnings {
		row(termtable.Paint(o.Color, termtable.Yellow, "warning:")+" ", wn)
	}
	if r.Seconds > 0 {
		fmt.Fprintf(w, "\nrewrite: %.1fs, %.0f MB/s of source layers\n", r.Seconds, r.MBps)
	}
	return nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, " ")
}
