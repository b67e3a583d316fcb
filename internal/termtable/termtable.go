// Package termtable lays out kiln's tables for people: columns that fit a
// terminal's width (80 when the output is not a terminal), long values
// shortened in the middle (digests to sha256:abcdef123456, paths to
// /usr/…/libcublasLt.so.12) while --json keeps them whole, prose wrapped
// under its indent, size bars, and colour only when asked for (the verb
// decides: a terminal, and NO_COLOR unset).
//
// Widths count runes as a terminal shows them (go-runewidth), colour
// escapes excluded.
package termtable

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/mattn/go-runewidth"

	"github.com/kiln-build/kiln/internal/termtext"
)

// DefaultWidth is the width of output that is not a terminal.
const DefaultWidth = 80

// Options is how a report is drawn: its width and whether it may colour.
type Options struct {
	Width int
	Color bool
}

// Option sets one of Options.
type Option func(*Options)

// Width draws for n columns.
func Width(n int) Option { return func(o *Options) { o.Width = n } }

// Color colours the output (only for a terminal that wants it).
func Color(on bool) Option { return func(o *Options) { o.Color = on } }

// Resolve applies opts to the defaults (80 columns, no colour).
func Resolve(opts ...Option) Options {
	o := Options{Width: DefaultWidth}
	for _, f := range opts {
		f(&o)
	}
	if o.Width <= 0 {
		o.Width = DefaultWidth
	}
	return o
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// Len is the number of columns s takes on a terminal.
func Len(s string) int { return runewidth.StringWidth(ansi.ReplaceAllString(s, "")) }

// Middle shortens s to n columns by cutting its middle ("/usr/local/…/
// libcudnn.so.9"), which keeps a path's file name and a reference's tag.
func Middle(s string, n int) string {
	if Len(s) <= n {
		return s
	}
	if n <= 1 {
		return runewidth.Truncate(s, n, "")
	}
	r := []rune(s)
	tail := (n - 1) / 2
	head := n - 1 - tail
	return runewidth.Truncate(string(r[:len(r)-tail]), head, "") + "…" + string(r[len(r)-tail:])
}

// End shortens s to n columns by cutting its end.
func End(s string, n int) string {
	if Len(s) <= n {
		return s
	}
	return runewidth.Truncate(s, n, "…")
}

// Digest shortens "sha256:<64 hex>" to "sha256:" and 12 hex digits, as
// docker does; anything else is returned as it is.
func Digest(d string) string {
	if i := strings.Index(d, ":"); i >= 0 && len(d) > i+13 {
		return d[:i+13]
	}
	return d
}

// Bar is a size bar of width cells for frac (0..1): "▇▇▇▇▏" style,
// at least one cell for anything above zero.
func Bar(frac float64, width int) string {
	if frac <= 0 || width <= 0 {
		return ""
	}
	n := int(frac*float64(width) + 0.5)
	return strings.Repeat("▇", max(1, min(n, width)))
}

// Wrap breaks s into lines of at most width columns at spaces; lines
// after the first start with indent. A word longer than a line is broken
// after its commas (a long comma list); one without a comma (a path, a
// reference with its digest, a URL) stays whole on a line of its own,
// wider than the line: a person copies it whole.
func Wrap(s string, width int, indent string) []string {
	var out []string
	line := ""
	room := func() int {
		if len(out) == 0 {
			return max(width, 1)
		}
		return max(width-Len(indent), 1)
	}
	for _, w := range strings.Fields(s) {
		if line != "" && Len(line)+1+Len(w) <= room() {
			line += " " + w
			continue
		}
		if line != "" {
			out = append(out, line)
		}
		line = w
		for Len(line) > room() {
			head := runewidth.Truncate(line, room(), "")
			cut := strings.LastIndex(head, ",")
			if cut < 0 {
				break // no comma to break after: whole
			}
			out = append(out, line[:cut+1])
			line = line[cut+1:]
		}
	}
	if line != "" || len(out) == 0 {
		out = append(out, line)
	}
	for i := 1; i < len(out); i++ {
		out[i] = indent + out[i]
	}
	return out
}

// Fprintw writes the lines of Wrap(s) to w. s loses terminal control
// characters (it may quote an image's or a host's text); first may be
// painted.
func Fprintw(w io.Writer, width int, first, indent, s string) {
	for _, l := range Hang(width, first, indent, termtext.Clean(s)) {
		fmt.Fprintln(w, l)
	}
}

// Hang is s wrapped to width after first: its first line starts with
// first, the others with as many spaces as the wider of first and indent.
func Hang(width int, first, indent, s string) []string {
	lines := Wrap(s, width-Len(first), strings.Repeat(" ", max(0, Len(indent)-Len(first))))
	for i := range lines {
		if i == 0 {
			lines[i] = first + lines[i]
		} else {
			lines[i] = strings.Repeat(" ", Len(first)) + lines[i]
		}
	}
	return lines
}

// Column is one column of a Table.
type Column struct {
	Head string
	// Right aligns the column's cells right (numbers).
	Right bool
	// Shrink lets the table cut this column's cells (in the middle, or at
	// the end with ShrinkEnd) when the table is wider than its width;
	// Min is the narrowest it gets (default 8).
	Shrink    bool
	ShrinkEnd bool
	Min       int
	// Wrap lets the column give up columns like Shrink, but its cells
	// are wrapped onto more lines instead of cut: prose that must stay
	// whole.
	Wrap bool
}

// Table is a table that fits a width: the shrinkable columns give up
// columns, widest first, until the rows fit.
type Table struct {
	cols   []Column
	rows   [][]string
	indent string
	gap    int
	opts   Options
	style  func(row int, col int, s string) string
}

// New returns a table with cols, drawn with opts.
func New(o Options, cols ...Column) *Table {
	return &Table{cols: cols, gap: 2, opts: o}
}

// Indent starts every line with s.
func (t *Table) Indent(s string) *Table { t.indent = s; return t }

// Style colours a cell after layout (row -1 is the header); it is only
// called when the table may colour.
func (t *Table) Style(f func(row, col int, s string) string) *Table { t.style = f; return t }

// NoHeader drops the header line.
func (t *Table) NoHeader() *Table {
	for i := range t.cols {
		t.cols[i].Head = ""
	}
	return t
}

// Row adds a row; missing cells are empty. Cells lose terminal control
// characters (a layer's created_by, a file's name, a host's message come
// from images and hosts); Style colours them after.
func (t *Table) Row(cells ...string) {
	r := make([]string, len(t.cols))
	for i := range r {
		if i < len(cells) {
			r[i] = strings.Join(strings.Fields(termtext.Clean(cells[i])), " ")
		}
	}
	t.rows = append(t.rows, r)
}

// Len is the number of rows.
func (t *Table) Len() int { return len(t.rows) }

// widths is each column's width after shrinking to fit.
func (t *Table) widths() []int {
	w := make([]int, len(t.cols))
	for i, c := range t.cols {
		w[i] = Len(c.Head)
		for _, r := range t.rows {
			w[i] = max(w[i], Len(r[i]))
		}
	}
	total := func() int {
		n := Len(t.indent)
		for i, x := range w {
			if x > 0 || t.cols[i].Head != "" {
				n += x + t.gap
			}
		}
		return n - t.gap
	}
	for over := total() - t.opts.Width; over > 0; over = total() - t.opts.Width {
		best := -1
		for i, c := range t.cols {
			lo := c.Min
			if lo == 0 {
				lo = 8
			}
			if (c.Shrink || c.Wrap) && w[i] > lo && (best < 0 || w[i] > w[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		lo := t.cols[best].Min
		if lo == 0 {
			lo = 8
		}
		w[best]--
	}
	return w
}

// Write draws the table to w.
func (t *Table) Write(w io.Writer) error {
	ws := t.widths()
	var b strings.Builder
	line := func(row int, cells []string) {
		// A wrapped cell spreads the row over more lines.
		parts := make([][]string, len(cells))
		height := 1
		for i, c := range cells {
			parts[i] = []string{c}
			if t.cols[i].Wrap && Len(c) > ws[i] {
				parts[i] = Wrap(c, ws[i], "")
			}
			height = max(height, len(parts[i]))
		}
		for k := range height {
			sub := make([]string, len(cells))
			for i := range cells {
				if k < len(parts[i]) {
					sub[i] = parts[i][k]
				}
			}
			t.line(&b, ws, row, sub)
		}
	}
	head := false
	hs := make([]string, len(t.cols))
	for i, c := range t.cols {
		hs[i] = c.Head
		head = head || c.Head != ""
	}
	if head {
		line(-1, hs)
	}
	for i, r := range t.rows {
		line(i, r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// line writes one line of cells laid out in widths ws.
func (t *Table) line(b *strings.Builder, ws []int, row int, cells []string) {
	var l strings.Builder
	l.WriteString(t.indent)
	last := len(cells) - 1
	for last >= 0 && cells[last] == "" && !t.cols[last].Right {
		last--
	}
	for i := 0; i <= last; i++ {
		s := cells[i]
		if Len(s) > ws[i] {
			if t.cols[i].ShrinkEnd {
				s = End(s, ws[i])
			} else {
				s = Middle(s, ws[i])
			}
		}
		pad := strings.Repeat(" ", ws[i]-Len(s))
		if t.opts.Color && t.style != nil && s != "" {
			s = t.style(row, i, s)
		}
		if t.cols[i].Right {
			s = pad + s
		} else if i < last {
			s += pad
		}
		if i > 0 {
			l.WriteString(strings.Repeat(" ", t.gap))
		}
		l.WriteString(s)
	}
	b.WriteString(strings.TrimRight(l.String(), " "))
	b.WriteString("\n")
}

// Colours, as SGR escapes; Paint returns s unchanged when off.
const (
	Bold   = "1"
	Dim    = "2"
	Red    = "31"
	Green  = "32"
	Yellow = "33"
	Cyan   = "36"
)

// Paint wraps s in the SGR code when on.
func Paint(on bool, code, s string) string {
	if !on || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// Labeled writes text of "label value" lines (labels padded to label
// columns, as kiln's key-value reports print them) to w within width:
// a line too long wraps its value under itself, past the label.
func Labeled(w io.Writer, width, label int, text string) {
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if Len(l) <= width {
			fmt.Fprintln(w, termtext.Clean(l))
			continue
		}
		if len(l) <= label || strings.TrimSpace(l[:label]) == "" {
			Fprintw(w, width, "", "", l)
			continue
		}
		Fprintw(w, width, l[:label], strings.Repeat(" ", label), l[label:])
	}
}
