package analyze

import (
	"cmp"
	"fmt"
	"io"
	"strings"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
)

// WriteTable prints the report for people, fitted to the width in opts
// (80 columns by default): digests and paths are shortened there and
// prose wrapped; --json keeps every value whole.
func (r *Report) WriteTable(w io.Writer, opts ...termtable.Option) error {
	o := termtable.Resolve(opts...)
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	head := func(s string) { p("\n%s\n", termtable.Paint(o.Color, termtable.Bold, s)) }
	field := func(name, format string, a ...any) {
		termtable.Fprintw(w, o.Width, fmt.Sprintf("%-10s", name), "          ", fmt.Sprintf(format, a...))
	}
	p("%-10s%s\n", "Image", termtable.Middle(r.Image, o.Width-10))
	field("Digest", "%s (%s, %s)", termtable.Digest(r.Digest), r.Platform, r.Source)
	field("Size", "%s compressed, %s uncompressed, %s visible in %d files",
		bytesize.Format(r.CompressedSize), bytesize.Format(r.UncompressedSize), bytesize.Format(r.VisibleSize), r.FileCount)
	field("Waste", "%s in superseded files; efficiency %.2f%% (dive would report %s wasted)",
		bytesize.Format(r.Waste.WastedBytes), 100*r.Waste.Efficiency, bytesize.Format(r.Waste.DiveWastedBytes))
	if !r.Verified {
		field("Digests", "NOT verified (--no-verify)")
	}
	head("LAYERS")
	var largest int64
	for _, l := range r.Layers {
		largest = max(largest, l.CompressedSize)
	}
	const barWidth = 8
	t := termtable.New(o, termtable.Column{Head: "#", Right: true}, termtable.Column{Head: "DIGEST"},
		termtable.Column{Head: "SIZE", Right: true}, termtable.Column{}, termtable.Column{Head: "UNPACKED", Right: true},
		termtable.Column{Head: "WASTED", Right: true}, termtable.Column{Head: "CREATED BY", Shrink: true, ShrinkEnd: true, Min: 10})
	var flagged [][]string
	for _, l := range r.Layers {
		var f []string
		for _, c := range classify.AllClasses {
			if c == classify.ClassCUDALibs {
				continue
			}
			if n := l.BytesByClass[string(c)]; n > 0 {
				f = append(f, fmt.Sprintf("%s %s", c, bytesize.Format(n)))
			}
		}
		flagged = append(flagged, f)
		bar := ""
		if largest > 0 {
			bar = termtable.Bar(float64(l.CompressedSize)/float64(largest), barWidth)
		}
		t.Row(fmt.Sprint(l.Index), termtable.Digest(cmp.Or(l.Digest, l.DiffID)), bytesize.Format(l.CompressedSize), bar,
			bytesize.Format(l.UncompressedSize), bytesize.Format(l.WastedBytes), l.CreatedBy)
	}
	t.Style(func(row, col int, s string) string {
		switch {
		case row < 0:
			return s
		case col == 3:
			return termtable.Paint(true, termtable.Cyan, s)
		case col == 5 && r.Layers[row].WastedBytes > 0:
			return termtable.Paint(true, termtable.Yellow, s)
		}
		return s
	})
	if err := t.Write(w); err != nil {
		return err
	}
	for i, f := range flagged {
		if len(f) > 0 {
			termtable.Fprintw(w, o.Width, fmt.Sprintf("  layer %d flagged: ", r.Layers[i].Index), "    ", strings.Join(f, ", "))
		}
	}

	head("FINDINGS")
	t = termtable.New(o, termtable.Column{Head: "CLASS"}, termtable.Column{Head: "FILES", Right: true},
		termtable.Column{Head: "SHIPPED", Right: true}, termtable.Column{Head: "VISIBLE", Right: true},
		termtable.Column{Head: "LARGEST", Shrink: true, Min: 16})
	for _, c := range r.Classes {
		if c.Files == 0 {
			continue
		}
		top := ""
		if len(c.Top) > 0 {
			top = fmt.Sprintf("%s (%s)", c.Top[0].Path, bytesize.Format(c.Top[0].Size))
			if c.Top[0].Format != "" {
				top += " " + c.Top[0].Format
			}
		}
		t.Row(string(c.Class), fmt.Sprint(c.Files), bytesize.Format(c.Bytes), bytesize.Format(c.VisibleBytes), top)
	}
	if err := t.Write(w); err != nil {
		return err
	}
	for _, c := range r.Classes {
		if c.Files > 0 && c.Class != classify.ClassCUDALibs {
			termtable.Fprintw(w, o.Width, fmt.Sprintf("  %-12s fix: ", c.Class), "    ", c.Fix)
		}
	}
	if len(r.DuplicateCUDALibs) > 0 {
		head("CUDA LIBRARIES SHIPPED TWICE")
		for _, d := range r.DuplicateCUDALibs {
			var paths []string
			for _, c := range d.Copies {
				paths = append(paths, termtable.Middle(c.Path, o.Width-8))
			}
			termtable.Fprintw(w, o.Width, "  ", "    ", fmt.Sprintf("%s: %s wasted (%s)", d.Soname, bytesize.Format(d.WastedBytes), strings.Join(paths, ", ")))
		}
		termtable.Fprintw(w, o.Width, "  fix: ", "    ", classify.ClassCUDALibs.Fix())
	}
	if len(r.Waste.Top) > 0 {
		head("LARGEST WASTE")
		t = termtable.New(o, termtable.Column{Right: true}, termtable.Column{Shrink: true, Min: 16}, termtable.Column{}).NoHeader().Indent("  ")
		for _, f := range r.Waste.Top {
			t.Row(bytesize.Format(f.Size), f.Path, fmt.Sprintf("layer %d, %s by layer %d", f.Layer, f.How, f.By))
		}
		if err := t.Write(w); err != nil {
			return err
		}
	}
	head("CUDA")
	c := r.CUDA
	p("  CUDA_VERSION         %s\n", dash(c.CUDAVersion))
	p("  cudart in files      %s\n", dash(c.RuntimeVersion))
	cudnn := dash(c.CuDNNVersion)
	if c.CuDNNSource != "" {
		cudnn += " (" + c.CuDNNSource + ")"
	}
	termtable.Fprintw(w, o.Width, "  cuDNN                ", strings.Repeat(" ", 23), cudnn)
	cf := func(name, format string, a ...any) {
		termtable.Fprintw(w, o.Width, fmt.Sprintf("  %-20s ", name), strings.Repeat(" ", 23), fmt.Sprintf(format, a...))
	}
	if c.Requirement != nil {
		req := "cuda>=" + dash(c.Requirement.CUDA)
		if len(c.Requirement.DriverBranches) > 0 {
			req += fmt.Sprintf(", or forward compat on driver branches %s for brands %s", strings.Join(c.Requirement.DriverBranches, "/"), strings.Join(c.Requirement.Brands, ", "))
		}
		cf("NVIDIA_REQUIRE_CUDA", "%s", req)
	} else {
		cf("NVIDIA_REQUIRE_CUDA", "-")
	}
	if c.MinDriver != nil {
		cf("minimum host driver", "%s (%s with minor-version compatibility, SASS-only code)", c.MinDriver.Toolkit, c.MinDriver.MinorVersionCompat)
	}
	if k := r.Kernels; k != nil {
		head(fmt.Sprintf("KERNELS (device code in %d shared libraries)", len(k.Libraries)))
		termtable.Fprintw(w, o.Width, "  SASS  ", "        ", dash(strings.Join(k.SM, " ")))
		termtable.Fprintw(w, o.Width, "  PTX   ", "        ", dash(strings.Join(k.PTX, " ")))
		if len(k.Coverage) > 0 {
			var sass, ptx, none []string
			for _, c := range k.Coverage {
				switch c.Runs {
				case RunsSASS:
					sass = append(sass, c.Arch)
				case RunsPTX:
					ptx = append(ptx, c.Arch)
				default:
					none = append(none, c.Arch)
				}
			}
			termtable.Fprintw(w, o.Width, "  coverage  ", "    ", fmt.Sprintf("SASS on %s; PTX JIT only on %s; no kernel on %s", dash(strings.Join(sass, " ")), dash(strings.Join(ptx, " ")), dash(strings.Join(none, " "))))
		}
		// The per-library inventory: the largest lists first would hide
		// the odd one out, so libraries keep path order; long lists are cut.
		const maxLibs = 20
		lt := termtable.New(o, termtable.Column{Head: "LIBRARY", Shrink: true, Min: 20}, termtable.Column{Head: "SASS", Shrink: true, ShrinkEnd: true, Min: 12},
			termtable.Column{Head: "PTX", Shrink: true, ShrinkEnd: true, Min: 8}).Indent("  ")
		for _, l := range k.Libraries[:min(maxLibs, len(k.Libraries))] {
			lt.Row(l.Path, dash(strings.Join(l.SM, " ")), dash(strings.Join(l.PTX, " ")))
		}
		if err := lt.Write(w); err != nil {
			return err
		}
		if len(k.Libraries) > maxLibs {
			p("  … %d more libraries (--json lists all)\n", len(k.Libraries)-maxLibs)
		}
		for _, g := range k.GPUs {
			verdict := "covered"
			switch {
			case len(k.Libraries) == 0:
				verdict = "no GPU code in the image: nothing of it runs on a GPU (CPU only, or its CUDA code comes from elsewhere)"
			case !g.Covered:
				verdict = fmt.Sprintf("NO KERNEL in %d libraries, e.g. %s", len(g.Missing), g.Missing[0])
			case len(g.JIT) > 0:
				verdict = fmt.Sprintf("covered, %d libraries only through PTX JIT (slow first start; driver >= toolkit), e.g. %s", len(g.JIT), g.JIT[0])
			}
			termtable.Fprintw(w, o.Width, fmt.Sprintf("  %-18s %-5s ", g.GPU, g.ComputeCapability), "    ", verdict)
		}
	}
	if len(r.LargestFiles) > 0 {
		head("LARGEST FILES")
		t = termtable.New(o, termtable.Column{Right: true}, termtable.Column{Shrink: true, Min: 16}, termtable.Column{}, termtable.Column{}).NoHeader().Indent("  ")
		for _, f := range r.LargestFiles {
			note := string(f.Class)
			if f.Deleted {
				note = strings.TrimSpace(note + " (deleted later)")
			}
			t.Row(bytesize.Format(f.Size), f.Path, fmt.Sprintf("layer %d", f.Layer), note)
		}
		if err := t.Write(w); err != nil {
			return err
		}
	}
	for _, wng := range r.Warnings {
		termtable.Fprintw(w, o.Width, termtable.Paint(o.Color, termtable.Yellow, "warning:")+" ", "    ", wng)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
