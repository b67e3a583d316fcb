package analyze

import (
	"cmp"
	"fmt"
	"io"
	"strings"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
)

// SignedSize prints a change of n bytes: "+1.5 MiB", "-512 B", "0 B".
func SignedSize(n int64) string {
	switch {
	case n > 0:
		return "+" + bytesize.Format(n)
	case n < 0:
		return "-" + bytesize.Format(-n)
	}
	return "0 B"
}

// WriteTable prints the diff for people, fitted to the width in opts (80
// columns by default): the two images, the sizes before → after, the bytes
// to pull, the layers and classes that changed and the largest files
// added, removed, grown and shrunk. Paths are shortened here; --json has
// them whole.
func (d *DiffReport) WriteTable(w io.Writer, opts ...termtable.Option) error {
	o := termtable.Resolve(opts...)
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	head := func(s string) { p("\n%s\n", termtable.Paint(o.Color, termtable.Bold, s)) }
	field := func(name, format string, a ...any) {
		termtable.Fprintw(w, o.Width, fmt.Sprintf("%-10s", name), "          ", fmt.Sprintf(format, a...))
	}
	paint := func(n int64, s string) string {
		switch {
		case n > 0:
			return termtable.Paint(o.Color, termtable.Red, s)
		case n < 0:
			return termtable.Paint(o.Color, termtable.Green, s)
		}
		return s
	}
	b, a := d.Before, d.After
	for _, s := range []struct {
		name string
		side DiffSide
	}{{"Before", b}, {"After", a}} {
		p("%-10s%s\n", s.name, termtable.Middle(s.side.Image, o.Width-10))
		field("", "%s (%s), %d layers", termtable.Digest(s.side.Digest), s.side.Platform, s.side.LayerCount)
	}
	arrow := func(x, y int64) string {
		return fmt.Sprintf("%s → %s (%s)", bytesize.Format(x), bytesize.Format(y), paint(y-x, SignedSize(y-x)))
	}
	field("Size", "%s compressed", arrow(b.CompressedSize, a.CompressedSize))
	field("Unpacked", "%s", arrow(b.UncompressedSize, a.UncompressedSize))
	field("Visible", "%s in %d → %d files", arrow(b.VisibleSize, a.VisibleSize), b.FileCount, a.FileCount)
	field("To pull", "%s in %d new layer(s), for a host that has the baseline",
		termtable.Paint(o.Color, termtable.Bold, bytesize.Format(d.PullBytes)), len(d.AddedLayers))
	field("Layers", "%d shared, %d added, %d removed", d.SharedLayers, len(d.AddedLayers), len(d.RemovedLayers))
	label, cw := "Files", 1
	for _, c := range DiffChanges {
		cw = max(cw, len(fmt.Sprint(d.Changes[c].Files)))
	}
	for _, c := range DiffChanges {
		s := d.Changes[c]
		if s.Files == 0 {
			continue
		}
		var n, note string
		switch c {
		case ChangeAdded, ChangeGrown:
			n = SignedSize(s.Bytes)
		case ChangeRemoved, ChangeShrunk:
			n = SignedSize(-s.Bytes)
		case ChangeRewritten:
			n, note = bytesize.Format(s.Bytes), "same size, in a new layer"
		}
		p("%s\n", strings.TrimRight(fmt.Sprintf("%-10s%*d %-9s %11s  %s", label, cw, s.Files, c, n, note), " "))
		label = ""
	}
	if label != "" {
		field(label, "none in either image")
	}
	if len(d.AddedLayers)+len(d.RemovedLayers) > 0 {
		head("LAYERS ADDED (+) AND REMOVED (-)")
		t := termtable.New(o, termtable.Column{}, termtable.Column{Head: "#", Right: true}, termtable.Column{Head: "DIGEST"},
			termtable.Column{Head: "SIZE", Right: true}, termtable.Column{Head: "UNPACKED", Right: true},
			termtable.Column{Head: "CREATED BY", Shrink: true, ShrinkEnd: true, Min: 10})
		var signs []string
		row := func(sign string, l LayerReport) {
			signs = append(signs, sign)
			t.Row(sign, fmt.Sprint(l.Index), termtable.Digest(cmp.Or(l.Digest, l.DiffID)), bytesize.Format(l.CompressedSize),
				bytesize.Format(l.UncompressedSize), l.CreatedBy)
		}
		for _, l := range d.AddedLayers {
			row("+", l)
		}
		for _, l := range d.RemovedLayers {
			row("-", l)
		}
		t.Style(func(r, col int, s string) string {
			if r < 0 || col != 0 {
				return s
			}
			if signs[r] == "+" {
				return termtable.Paint(true, termtable.Red, s)
			}
			return termtable.Paint(true, termtable.Green, s)
		})
		if err := t.Write(w); err != nil {
			return err
		}
	}

	if len(d.Classes) > 0 {
		head("CLASSES (visible bytes)")
		t := termtable.New(o, termtable.Column{Head: "CLASS"}, termtable.Column{Head: "AFTER", Right: true},
			termtable.Column{Head: "CHANGE", Right: true}, termtable.Column{Head: "ADDED", Right: true},
			termtable.Column{Head: "REMOVED", Right: true}, termtable.Column{Head: "RESIZED", Right: true})
		for _, c := range d.Classes {
			t.Row(c.Class, bytesize.Format(c.AfterBytes), SignedSize(c.Delta), SignedSize(c.AddedBytes), SignedSize(-c.RemovedBytes), SignedSize(c.ChangedBytes))
		}
		t.Style(func(r, col int, s string) string {
			if r >= 0 && col == 2 {
				return paint(d.Classes[r].Delta, s)
			}
			return s
		})
		if err := t.Write(w); err != nil {
			return err
		}
	}

	for _, l := range []struct {
		change string
		files  []FileChange
	}{{ChangeAdded, d.Added}, {ChangeRemoved, d.Removed}, {ChangeGrown, d.Grown}, {ChangeShrunk, d.Shrunk}} {
		if len(l.files) == 0 {
			continue
		}
		title := fmt.Sprintf("FILES %s", strings.ToUpper(l.change))
		if n := d.Changes[l.change].Files; n > len(l.files) {
			title += fmt.Sprintf(" (largest %d of %d)", len(l.files), n)
		}
		head(title)
		t := termtable.New(o, termtable.Column{Right: true}, termtable.Column{Shrink: true, Min: 16}, termtable.Column{}, termtable.Column{}).NoHeader().Indent("  ")
		for _, f := range l.files {
			var detail string
			switch l.change {
			case ChangeAdded:
				detail = fmt.Sprintf("layer %d", *f.AfterLayer)
			case ChangeRemoved:
				detail = fmt.Sprintf("was layer %d", *f.BeforeLayer)
			default:
				detail = fmt.Sprintf("%s → %s", bytesize.Format(f.BeforeSize), bytesize.Format(f.AfterSize))
			}
			t.Row(SignedSize(f.Delta), f.Path, detail, string(f.Class))
		}
		if err := t.Write(w); err != nil {
			return err
		}
	}
	return nil
}
