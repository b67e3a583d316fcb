package hostcheck

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

var statusWord = map[Status]string{Pass: "PASS", Warn: "WARN", Fail: "FAIL", Skip: "skip"}

// WriteTable renders the report for humans: one line per item, then its
// evidence (·) and fixes (→) indented below when it did not pass.
func (r *Report) WriteTable(w io.Writer) error {
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
	fmt.Fprintf(&b, "HOST   %s: %s, %d GPU(s)\n", name, drv, len(h.GPUs))
	if im := r.Image; im != nil {
		fmt.Fprintf(&b, "IMAGE  %s: CUDA %s", im.Ref, dashOr(im.CUDA, "?"))
		if im.Kernels != nil {
			fmt.Fprintf(&b, ", SASS %s, PTX %s", dashJoin(im.Kernels.SM, " "), dashJoin(im.Kernels.PTX, " "))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, it := range r.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", statusWord[it.Status], it.Title, it.Summary)
	}
	tw.Flush()
	for _, it := range r.Items {
		if it.Status != Fail && it.Status != Warn {
			continue
		}
		fmt.Fprintf(&b, "\n%s %s\n", statusWord[it.Status], it.Title)
		for _, e := range it.Evidence {
			fmt.Fprintf(&b, "  · %s\n", e)
		}
		for _, f := range it.Fix {
			fmt.Fprintf(&b, "  → %s\n", f)
		}
	}
	c := r.Counts
	fmt.Fprintf(&b, "\n%d failed, %d warned, %d passed, %d skipped\n", c.Fail, c.Warn, c.Pass, c.Skip)
	_, err := io.WriteString(w, b.String())
	return err
}
