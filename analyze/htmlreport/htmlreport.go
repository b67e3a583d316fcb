// Package htmlreport writes kiln analyze's report as one self-contained
// HTML page: a treemap of the squashed filesystem (SVG laid out here, in
// Go, coloured by class or by layer), the waste list, the CUDA facts and
// the layer and class tables. The page loads nothing: CSS and the few
// lines of script (colour toggle, hover line) are inline, so it opens
// offline and can be attached to a CI run.
package htmlreport

import (
	"cmp"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"path"
	"strings"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/bytesize"
)

// Treemap size in SVG units; the page scales it to the window's width.
const (
	defaultWidth  = 1200
	defaultHeight = 640
	header        = 14 // a directory's name strip
)

type options struct {
	w, h float64
	diff *analyze.DiffReport
}

// Option tunes the page.
type Option func(*options)

// WithSize sets the treemap's size in SVG units (default 1200×640).
func WithSize(w, h int) Option {
	return func(o *options) { o.w, o.h = float64(w), float64(h) }
}

// WithDiff adds what changed against a baseline (kiln analyze --against):
// the before → after sizes, the bytes to pull, the layers, classes and
// files that changed, and the treemap coloured by change (the default).
func WithDiff(d *analyze.DiffReport) Option {
	return func(o *options) { o.diff = d }
}

// changeColors colour the treemap by change; removed files are not in
// the image, so not in its treemap (the tables list them).
var changeColors = []legend{
	{analyze.ChangeAdded, "#2ca02c"},
	{analyze.ChangeGrown, "#ff7f0e"},
	{analyze.ChangeShrunk, "#1f77b4"},
	{analyze.ChangeRewritten, "#9467bd"},
	{analyze.ChangeUnchanged, "#dcdcdc"},
}

// classColors are the treemap's class colours; "other" is grey.
var classColors = map[classify.Class]string{
	classify.ClassDevTools:   "#d62728",
	classify.ClassHeaders:    "#ff7f0e",
	classify.ClassStaticLibs: "#8c564b",
	classify.ClassDocs:       "#bcbd22",
	classify.ClassCaches:     "#9467bd",
	classify.ClassWeights:    "#1f77b4",
	classify.ClassCUDALibs:   "#2ca02c",
	classify.ClassOther:      "#a6a6a6",
}

func className(c classify.Class) string {
	if c == classify.ClassOther {
		return "other"
	}
	return string(c)
}

func layerColor(i int) string {
	return fmt.Sprintf("hsl(%d,60%%,%d%%)", int(math.Mod(float64(i)*137.508, 360)), 48+(i%3)*8)
}

// Write writes r as an HTML page to w. r.Tree must be set (analyze's
// Options.Tree); without it the page has no treemap.
func Write(w io.Writer, r *analyze.Report, opts ...Option) error {
	o := options{w: defaultWidth, h: defaultHeight}
	for _, f := range opts {
		f(&o)
	}
	p := page{R: r, Width: o.w, Height: o.h, Diff: o.diff, Mode: "by-class"}
	if o.diff != nil {
		p.Mode, p.Changes = "by-change", changeColors
	}
	var svg strings.Builder
	if r.Tree != nil && r.Tree.Size > 0 {
		largest := largestFile(r.Tree)
		d := drawer{b: &svg, largest: largest, diff: o.diff}
		d.node(r.Tree, Rect{0, 0, o.w, o.h}, "", true)
		p.Drawn, p.Boxes = d.drawn, d.boxes
		if largest != nil {
			p.Largest = largest
		}
	}
	p.SVG = template.HTML(svg.String())
	for _, c := range append(classify.AllClasses, classify.ClassOther) {
		p.Classes = append(p.Classes, legend{Name: className(c), Color: classColors[c]})
	}
	for i := range r.Layers {
		p.Layers = append(p.Layers, legend{Name: fmt.Sprint(i), Color: layerColor(i)})
	}
	return pageTmpl.Execute(w, p)
}

type legend struct{ Name, Color string }

type page struct {
	R             *analyze.Report
	Width, Height float64
	SVG           template.HTML
	Classes       []legend
	Layers        []legend
	Largest       *analyze.TreeNode
	Drawn, Boxes  int
	// Diff is the comparison with a baseline (WithDiff); Changes its
	// colours and Mode the colouring the page opens with.
	Diff    *analyze.DiffReport
	Changes []legend
	Mode    string
}

// ChangeNames are the changes in the order the page lists them.
func (page) ChangeNames() []string { return analyze.DiffChanges }

// FileLists are the diff's file lists in the order the page lists them.
func (p page) FileLists() [][]analyze.FileChange {
	return [][]analyze.FileChange{p.Diff.Added, p.Diff.Removed, p.Diff.Grown, p.Diff.Shrunk}
}

// largestFile is the tree's largest file (not a summed box).
func largestFile(n *analyze.TreeNode) *analyze.TreeNode {
	var best *analyze.TreeNode
	var walk func(*analyze.TreeNode)
	walk = func(n *analyze.TreeNode) {
		if !n.Dir && n.Path != "" && (best == nil || n.Size > best.Size) {
			best = n
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(n)
	return best
}

type drawer struct {
	b       *strings.Builder
	largest *analyze.TreeNode
	diff    *analyze.DiffReport
	drawn   int // boxes with an area of at least one unit
	boxes   int
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// node draws n in r: a directory as a frame with its name and its entries
// inside, anything else as a coloured box. parent is the path of the
// directory n is listed in.
func (d *drawer) node(n *analyze.TreeNode, r Rect, parent string, root bool) {
	if r.W < 0.5 || r.H < 0.5 {
		return
	}
	if len(n.Children) == 0 || r.W < 6 || r.H < header+4 {
		d.box(n, r, parent)
		return
	}
	inner := r
	if !root {
		fmt.Fprintf(d.b, `<rect class="dir" x="%s" y="%s" width="%s" height="%s"><title>%s</title></rect>`,
			f1(r.X), f1(r.Y), f1(r.W), f1(r.H), html.EscapeString(n.Path+"/ — "+bytesize.Format(n.Size)))
		d.label(r.X+2, r.Y+11, r.W-4, n.Name+"/", "dl")
		inner = Rect{r.X + 1, r.Y + header, r.W - 2, r.H - header - 1}
	}
	scale := inner.W * inner.H / float64(n.Size)
	var areas []float64
	var kids []*analyze.TreeNode
	for _, c := range n.Children {
		if c.Size > 0 {
			areas, kids = append(areas, float64(c.Size)*scale), append(kids, c)
		}
	}
	for i, cr := range squarify(areas, inner) {
		d.node(kids[i], cr, n.Path, false)
	}
}

// change is the change a box stands for: its file's, or for a box of
// many files the change holding most of their bytes (a group of small
// entries takes its directory's).
func (d *drawer) change(n *analyze.TreeNode, parent string) string {
	switch {
	case n.Path == "":
		return d.diff.ChangeUnder(parent)
	case n.Dir:
		return d.diff.ChangeUnder(n.Path)
	}
	return d.diff.Change(n.Path)
}

func (d *drawer) box(n *analyze.TreeNode, r Rect, parent string) {
	d.boxes++
	if r.W*r.H >= 1 {
		d.drawn++
	}
	what := "file"
	if n.Summed() {
		what = fmt.Sprintf("%d files", n.Files)
	}
	p := n.Path
	if p == "" {
		p = n.Name
	}
	extra := ""
	if n == d.largest {
		extra = ` id="largest"`
	}
	tip := fmt.Sprintf("%s — %s, %s, %s, layer %d", p, bytesize.Format(n.Size), what, className(n.Class), n.Layer)
	chg := ""
	if d.diff != nil {
		c := d.change(n, parent)
		if n.Summed() && c != "" {
			tip += ", mostly " + c
		} else if c != "" {
			tip += ", " + c
		}
		chg = " d-" + cmp.Or(c, "none")
	}
	fmt.Fprintf(d.b, `<rect class="f c-%s l-%d%s"%s x="%s" y="%s" width="%s" height="%s" data-path="%s" data-size="%d"><title>%s</title></rect>`,
		className(n.Class), n.Layer, chg, extra, f1(r.X), f1(r.Y), f1(r.W), f1(r.H), html.EscapeString(p), n.Size, html.EscapeString(tip))
	if r.H >= 12 {
		d.label(r.X+2, r.Y+11, r.W-4, n.Name, "fl")
	}
}

// label writes text that fits w units (about 6 per character), or
// nothing when even a few characters do not.
func (d *drawer) label(x, y, w float64, s, class string) {
	n := int(w / 6.2)
	if n < 4 {
		return
	}
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	fmt.Fprintf(d.b, `<text class="%s" x="%s" y="%s">%s</text>`, class, f1(x), f1(y), html.EscapeString(s))
}

var funcs = template.FuncMap{
	"size": bytesize.Format,
	"short": func(s string) string {
		return strings.TrimPrefix(s, "sha256:")[:min(12, len(strings.TrimPrefix(s, "sha256:")))]
	},
	"pct":  func(f float64) string { return fmt.Sprintf("%.1f%%", f*100) },
	"base": path.Base,
	"cls":  className,
	"join": strings.Join,
	"cut": func(s string, n int) string {
		if r := []rune(s); len(r) > n {
			return string(r[:n-1]) + "…"
		}
		return s
	},
	"css":    func(s string) template.CSS { return template.CSS(s) },
	"signed": analyze.SignedSize,
	"delta":  func(a, b int64) string { return analyze.SignedSize(b - a) },
	"neg":    func(n int64) int64 { return -n },
	"change": func(d *analyze.DiffReport, c string) analyze.ChangeSum { return d.Changes[c] },
}

var pageTmpl = template.Must(template.New("page").Funcs(funcs).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>kiln analyze {{.R.Image}}{{with .Diff}} --against {{.Before.Image}}{{end}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.sum{color:#444;margin:0 0 12px}.sum b{color:#000}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}code{font-size:12px}
.bar{display:inline-block;height:10px;background:#1f77b4;vertical-align:middle}
.tools button{font:inherit;padding:3px 10px;margin-right:4px;border:1px solid #999;background:#fff;border-radius:3px;cursor:pointer}
.tools button.on{background:#333;color:#fff}
.legend{display:inline-block;margin:6px 0}.legend span{display:inline-block;margin-right:10px;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
#tm{width:100%;height:auto;max-width:{{.Width}}px;background:#fff;border:1px solid #ccc;display:block}
#tm rect.dir{fill:#f0f0f0;stroke:#bbb;stroke-width:.5}
#tm rect.f{stroke:#fff;stroke-width:.4}
#tm text{font:10px system-ui,sans-serif;pointer-events:none}#tm text.fl{fill:#fff}#tm text.dl{fill:#333}
#info{font:12px ui-monospace,monospace;min-height:18px;margin:4px 0;color:#333}
{{range .Classes}}#tm.by-class .c-{{.Name}}{fill:{{css .Color}}}
{{end}}{{range .Layers}}#tm.by-layer .l-{{.Name}}{fill:{{css .Color}}}
{{end}}{{range .Changes}}#tm.by-change .d-{{.Name}}{fill:{{css .Color}}}
.chg-{{.Name}}{border-left:6px solid {{css .Color}};padding-left:4px}
{{end}}#tm.by-change .d-none{fill:#eee}.chg-removed{border-left:6px solid #d62728;padding-left:4px}
#tm.by-class text.fl,#tm.by-layer text.fl{fill:#fff}#tm.by-change text.fl{fill:#222}
.legend.lg{display:none}body.by-class .lg-class,body.by-layer .lg-layer,body.by-change .lg-change{display:inline-block}
td.up{color:#b22}td.down{color:#171}
</style></head>
<body class="{{.Mode}}">
<h1>kiln analyze {{.R.Image}}</h1>
<p class="sum"><code>{{.R.Digest}}</code> · {{.R.Platform}} · {{len .R.Layers}} layers ·
pull <b>{{size .R.CompressedSize}}</b> · unpacked {{size .R.UncompressedSize}} · visible <b>{{size .R.VisibleSize}}</b> in {{.R.FileCount}} files ·
efficiency {{pct .R.Waste.Efficiency}} · wasted <b>{{size .R.Waste.WastedBytes}}</b>{{if not .R.Verified}} · not verified{{end}}</p>
{{with .Diff}}{{$d := .}}
<h2 id="changes">Changes against {{.Before.Image}}</h2>
<p class="sum">baseline <code>{{.Before.Digest}}</code> ({{.Before.Platform}}, {{.Before.LayerCount}} layers) → this image ({{.After.LayerCount}} layers).
A host that has the baseline pulls <b>{{size .PullBytes}}</b> in {{len .AddedLayers}} new layer(s); {{.SharedLayers}} layer(s) shared, {{len .RemovedLayers}} removed.</p>
<table><tr><th></th><th class="n">before</th><th class="n">after</th><th class="n">change</th></tr>
{{with .Before}}{{$b := .}}{{with $d.After}}
<tr><th>pull (compressed)</th><td class="n">{{size $b.CompressedSize}}</td><td class="n">{{size .CompressedSize}}</td><td class="n">{{delta $b.CompressedSize .CompressedSize}}</td></tr>
<tr><th>unpacked</th><td class="n">{{size $b.UncompressedSize}}</td><td class="n">{{size .UncompressedSize}}</td><td class="n">{{delta $b.UncompressedSize .UncompressedSize}}</td></tr>
<tr><th>visible</th><td class="n">{{size $b.VisibleSize}}</td><td class="n">{{size .VisibleSize}}</td><td class="n">{{delta $b.VisibleSize .VisibleSize}}</td></tr>
<tr><th>files</th><td class="n">{{$b.FileCount}}</td><td class="n">{{.FileCount}}</td><td class="n"></td></tr>
{{end}}{{end}}</table>

<h2>Files by change</h2>
<table id="diff-changes"><tr><th>change</th><th class="n">files</th><th class="n">bytes</th></tr>
{{range $.ChangeNames}}<tr><td class="chg-{{.}}">{{.}}</td><td class="n">{{(change $d .).Files}}</td><td class="n">{{size (change $d .).Bytes}}</td></tr>
{{end}}</table>
{{end}}

<h2>Squashed filesystem</h2>
<div class="tools">{{if .Diff}}<button id="bd" data-mode="by-change" type="button">colour by change</button>{{end}}<button id="bc" data-mode="by-class" type="button">colour by class</button><button id="bl" data-mode="by-layer" type="button">colour by layer</button>
<span class="legend lg lg-class">{{range .Classes}}<span><i style="background:{{css .Color}}"></i>{{.Name}}</span>{{end}}</span>
<span class="legend lg lg-layer">{{range .Layers}}<span><i style="background:{{css .Color}}"></i>layer {{.Name}}</span>{{end}}</span>
{{if .Diff}}<span class="legend lg lg-change">{{range .Changes}}<span><i style="background:{{css .Color}}"></i>{{.Name}}</span>{{end}} (removed files: the tables below the map)</span>{{end}}</div>
<div id="info">{{with .Largest}}largest file: {{.Path}} ({{size .Size}}, {{cls .Class}}, layer {{.Layer}}){{end}}</div>
<svg id="tm" class="{{.Mode}}" viewBox="0 0 {{.Width}} {{.Height}}" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="treemap of the squashed filesystem">{{.SVG}}</svg>
<p class="sum">{{.Boxes}} boxes; directories with many small files are drawn as one box (hover for the path, size and count).</p>
{{with .Diff}}
{{if .Classes}}<h2>Classes that changed (visible bytes)</h2>
<table id="diff-classes"><tr><th>class</th><th class="n">before</th><th class="n">after</th><th class="n">change</th><th class="n">added</th><th class="n">removed</th><th class="n">resized</th></tr>
{{range .Classes}}<tr><td>{{.Class}}</td><td class="n">{{size .BeforeBytes}}</td><td class="n">{{size .AfterBytes}}</td><td class="n {{if gt .Delta 0}}up{{else if lt .Delta 0}}down{{end}}">{{signed .Delta}}</td><td class="n">{{signed .AddedBytes}} ({{.AddedFiles}})</td><td class="n">{{signed (neg .RemovedBytes)}} ({{.RemovedFiles}})</td><td class="n">{{signed .ChangedBytes}} ({{.ChangedFiles}})</td></tr>
{{end}}</table>{{end}}

{{if or .AddedLayers .RemovedLayers}}<h2>Layers added and removed</h2>
<table id="diff-layers"><tr><th></th><th class="n">#</th><th>digest</th><th class="n">pull</th><th class="n">unpacked</th><th>created by</th></tr>
{{range .AddedLayers}}<tr><td class="chg-added">added</td><td class="n">{{.Index}}</td><td><code>{{short (or .Digest .DiffID)}}</code></td><td class="n">{{size .CompressedSize}}</td><td class="n">{{size .UncompressedSize}}</td><td><code>{{cut .CreatedBy 120}}</code></td></tr>
{{end}}{{range .RemovedLayers}}<tr><td class="chg-removed">removed</td><td class="n">{{.Index}}</td><td><code>{{short (or .Digest .DiffID)}}</code></td><td class="n">{{size .CompressedSize}}</td><td class="n">{{size .UncompressedSize}}</td><td><code>{{cut .CreatedBy 120}}</code></td></tr>
{{end}}</table>{{end}}

{{if or .Added .Removed .Grown .Shrunk}}<h2>Largest file changes</h2>
<table id="diff-files"><tr><th>change</th><th>path</th><th class="n">before</th><th class="n">after</th><th class="n">change</th><th>class</th></tr>
{{range $.FileLists}}{{range .}}<tr><td class="chg-{{.Change}}">{{.Change}}</td><td><code>{{.Path}}</code></td><td class="n">{{if .BeforeLayer}}{{size .BeforeSize}}{{else}}—{{end}}</td><td class="n">{{if .AfterLayer}}{{size .AfterSize}}{{else}}—{{end}}</td><td class="n {{if gt .Delta 0}}up{{else if lt .Delta 0}}down{{end}}">{{signed .Delta}}</td><td>{{cls .Class}}</td></tr>
{{end}}{{end}}</table>{{end}}
{{end}}

<h2>CUDA</h2>
<table>{{with .R.CUDA}}
<tr><th>CUDA_VERSION</th><td>{{or .CUDAVersion "—"}}</td></tr>
<tr><th>cudart in the files</th><td>{{or .RuntimeVersion "—"}}</td></tr>
<tr><th>cuDNN</th><td>{{or .CuDNNVersion "—"}}{{with .CuDNNSource}} ({{.}}){{end}}</td></tr>
<tr><th>NVIDIA_REQUIRE_CUDA</th><td><code>{{cut (or .RequireCUDA "—") 160}}</code>{{if .DisableRequire}} (NVIDIA_DISABLE_REQUIRE set){{end}}</td></tr>
<tr><th>minimum driver</th><td>{{with .MinDriver}}≥ {{.Toolkit}} natively{{with .MinorVersionCompat}}, ≥ {{.}} with minor-version compatibility{{end}}{{else}}—{{end}}</td></tr>
<tr><th>cuda-compat</th><td>{{if .CompatLibs}}{{join .CompatLibs ", "}}{{else}}none (no forward compatibility on older data-center drivers){{end}}</td></tr>
{{end}}{{with .R.Kernels}}<tr><th>GPU code</th><td>SASS {{join .SM " "}}; PTX {{join .PTX " "}}</td></tr>{{end}}
</table>

<h2>Waste: superseded copies</h2>
{{if .R.Waste.Top}}<table><tr><th>path</th><th class="n">size</th><th class="n">layer</th><th>how</th></tr>
{{range .R.Waste.Top}}<tr><td><code>{{.Path}}</code></td><td class="n">{{size .Size}}</td><td class="n">{{.Layer}} → {{.By}}</td><td>{{.How}}</td></tr>
{{end}}</table>{{else}}<p>Nothing is superseded: every shipped byte is visible.</p>{{end}}

<h2>Classes</h2>
<table><tr><th>class</th><th class="n">shipped</th><th class="n">visible</th><th class="n">files</th><th>fix</th></tr>
{{range .R.Classes}}{{if .Bytes}}<tr><td>{{cls .Class}}</td><td class="n">{{size .Bytes}}</td><td class="n">{{size .VisibleBytes}}</td><td class="n">{{.Files}}</td><td>{{.Fix}}</td></tr>
{{end}}{{end}}</table>

<h2>Layers</h2>
<table><tr><th class="n">#</th><th class="n">pull</th><th class="n">unpacked</th><th class="n">wasted</th><th>created by</th></tr>
{{range .R.Layers}}<tr><td class="n">{{.Index}}</td><td class="n">{{size .CompressedSize}}</td><td class="n">{{size .UncompressedSize}}</td><td class="n">{{size .WastedBytes}}</td><td><code>{{cut .CreatedBy 120}}</code></td></tr>
{{end}}</table>

<h2>Largest files</h2>
<table><tr><th>path</th><th class="n">size</th><th class="n">layer</th><th>class</th></tr>
{{range .R.LargestFiles}}<tr><td><code>{{.Path}}</code>{{if .Deleted}} (deleted later){{end}}</td><td class="n">{{size .Size}}</td><td class="n">{{.Layer}}</td><td>{{cls .Class}}</td></tr>
{{end}}</table>
<script>
(function(){
var tm=document.getElementById('tm'),info=document.getElementById('info'),first=info.textContent;
var bs=document.querySelectorAll('.tools button');
function mode(m){tm.setAttribute('class',m);document.body.className=m;
for(var i=0;i<bs.length;i++)bs[i].className=bs[i].getAttribute('data-mode')==m?'on':'';}
for(var i=0;i<bs.length;i++)bs[i].onclick=function(){mode(this.getAttribute('data-mode'))};
mode(document.body.className);
tm.addEventListener('mouseover',function(e){var t=e.target.querySelector&&e.target.querySelector('title');info.textContent=t?t.textContent:first;});
tm.addEventListener('mouseleave',function(){info.textContent=first});
// The largest file's box is drawn when the browser finds it on top at
// its own centre: recorded for a headless check (data-drawn).
var l=document.getElementById('largest');
if(l){var b=l.getBoundingClientRect();
if(b.width>0&&b.height>0&&document.elementFromPoint(b.left+b.width/2,b.top+b.height/2)===l)l.setAttribute('data-drawn','1');}
})();
</script>
</body></html>
`
