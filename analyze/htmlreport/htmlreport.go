// Package htmlreport writes kiln analyze's report as one self-contained
// HTML page: a treemap of the squashed filesystem (SVG laid out here, in
// Go, coloured by class or by layer), the waste list, the CUDA facts and
// the layer and class tables. The page loads nothing: CSS and the few
// lines of script (colour toggle, hover line) are inline, so it opens
// offline and can be attached to a CI run.
package htmlreport

import (
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

type options struct{ w, h float64 }

// Option tunes the page.
type Option func(*options)

// WithSize sets the treemap's size in SVG units (default 1200×640).
func WithSize(w, h int) Option {
	return func(o *options) { o.w, o.h = float64(w), float64(h) }
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
	p := page{R: r, Width: o.w, Height: o.h}
	var svg strings.Builder
	if r.Tree != nil && r.Tree.Size > 0 {
		largest := largestFile(r.Tree)
		d := drawer{b: &svg, largest: largest}
		d.node(r.Tree, Rect{0, 0, o.w, o.h}, true)
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
	drawn   int // boxes with an area of at least one unit
	boxes   int
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// node draws n in r: a directory as a frame with its name and its entries
// inside, anything else as a coloured box.
func (d *drawer) node(n *analyze.TreeNode, r Rect, root bool) {
	if r.W < 0.5 || r.H < 0.5 {
		return
	}
	if len(n.Children) == 0 || r.W < 6 || r.H < header+4 {
		d.box(n, r)
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
		d.node(kids[i], cr, false)
	}
}

func (d *drawer) box(n *analyze.TreeNode, r Rect) {
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
	fmt.Fprintf(d.b, `<rect class="f c-%s l-%d"%s x="%s" y="%s" width="%s" height="%s" data-path="%s" data-size="%d"><title>%s</title></rect>`,
		className(n.Class), n.Layer, extra, f1(r.X), f1(r.Y), f1(r.W), f1(r.H), html.EscapeString(p), n.Size, html.EscapeString(tip))
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
	"css": func(s string) template.CSS { return template.CSS(s) },
}

var pageTmpl = template.Must(template.New("page").Funcs(funcs).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>kiln analyze {{.R.Image}}</title>
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
{{end}}#tm.by-class text.fl,#tm.by-layer text.fl{fill:#fff}
.lg-layer{display:none}body.by-layer .lg-layer{display:inline-block}body.by-layer .lg-class{display:none}
</style></head>
<body class="by-class">
<h1>kiln analyze {{.R.Image}}</h1>
<p class="sum"><code>{{.R.Digest}}</code> · {{.R.Platform}} · {{len .R.Layers}} layers ·
pull <b>{{size .R.CompressedSize}}</b> · unpacked {{size .R.UncompressedSize}} · visible <b>{{size .R.VisibleSize}}</b> in {{.R.FileCount}} files ·
efficiency {{pct .R.Waste.Efficiency}} · wasted <b>{{size .R.Waste.WastedBytes}}</b>{{if not .R.Verified}} · not verified{{end}}</p>

<h2>Squashed filesystem</h2>
<div class="tools"><button id="bc" class="on" type="button">colour by class</button><button id="bl" type="button">colour by layer</button>
<span class="legend lg-class">{{range .Classes}}<span><i style="background:{{css .Color}}"></i>{{.Name}}</span>{{end}}</span>
<span class="legend lg-layer">{{range .Layers}}<span><i style="background:{{css .Color}}"></i>layer {{.Name}}</span>{{end}}</span></div>
<div id="info">{{with .Largest}}largest file: {{.Path}} ({{size .Size}}, {{cls .Class}}, layer {{.Layer}}){{end}}</div>
<svg id="tm" class="by-class" viewBox="0 0 {{.Width}} {{.Height}}" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="treemap of the squashed filesystem">{{.SVG}}</svg>
<p class="sum">{{.Boxes}} boxes; directories with many small files are drawn as one box (hover for the path, size and count).</p>

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
function mode(m){tm.setAttribute('class',m);document.body.className=m;
document.getElementById('bc').className=m=='by-class'?'on':'';document.getElementById('bl').className=m=='by-layer'?'on':'';}
document.getElementById('bc').onclick=function(){mode('by-class')};
document.getElementById('bl').onclick=function(){mode('by-layer')};
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
