package hostcheck

import (
	"fmt"
	"io"
	"strings"

	"github.com/kiln-build/kiln/internal/termtable"
)

var statusWord = map[Status]string{Pass: "PASS", Warn: "WARN", Fail: "FAIL", Skip: "skip"}

var statusColor = map[Status]string{Pass: termtable.Green, Warn: termtable.Yellow, Fail: termtable.Red, Skip: termtable.Dim}

// WriteTable renders the report for humans: one line per item, then its
// evidence (·) and fixes (→) indented below when it did not pass, all
// fitted to the width in opts (80 by default; --json has every value).
func (r *Report) WriteTable(w io.Writer, opts ...termtable.Option) error {
	o := termtable.Resolve(opts...)
	var b strings.Builder
	h := r.Host
	drv := "no NVIDIA driver"
	if h.Driver != nil {
		drv = fmt.Sprintf("driver %s (CUDA %s)", h.Driver.Version, h.Driver.CUDAVersion)
	}
	name := h.Source
	if h.Hostname != "" {
		name += " " + h.Hostname
	}
	termtable.Fprintw(&b, o.Width, "HOST   ", "       ", fmt.Sprintf("%s: %s, %d GPU(s)", name, drv, len(h.GPUs)))
	if im := r.Image; im != nil {
		line := fmt.Sprintf("%s: CUDA %s", im.Ref, dashOr(im.CUDA, "?"))
		if im.Kernels != nil {
			line += fmt.Sprintf(", SASS %s, PTX %s", dashJoin(im.Kernels.SM, " "), dashJoin(im.Kernels.PTX, " "))
		}
		termtable.Fprintw(&b, o.Width, "IMAGE  ", "       ", line)
	}
	b.WriteString("\n")
	t := termtable.New(o, termtable.Column{}, termtable.Column{Wrap: true, Min: 16}, termtable.Column{Wrap: true, Min: 24}).NoHeader()
	for _, it := range r.Items {
		t.Row(statusWord[it.Status], it.Title, it.Summary)
	}
	t.Style(func(row, col int, s string) string {
		if col == 0 && row >= 0 {
			return termtable.Paint(true, statusColor[r.Items[row].Status], s)
		}
		return s
	})
	if err := t.Write(&b); err != nil {
		return err
	}
	for _, it := range r.Items {
		if it.Status != Fail && it.Status != Warn {
			continue
		}
		fmt.Fprintf(&b, "\n%s %s\n", termtable.Paint(o.Color, statusColor[it.Status], statusWord[it.Status]), it.Title)
		for _, e := range it.Evidence {
			termtable.Fprintw(&b, o.Width, "  · ", "    ", e)
		}
		for _, f := range it.Fix {
			termtable.Fprintw(&b, o.Width, "  → ", "    ", f)
		}
	}
	c := r.Counts
	fmt.Fprintf(&b, "\n%d failed, %d warned, %d passed, %d skipped\n", c.Fail, c.Warn, c.Pass, c.Skip)
	_, err := io.WriteString(w, b.String())
	return err
}
