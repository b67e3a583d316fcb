package analyze

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/bytesize"
)

// WriteTable prints the report for people.
func (r *Report) WriteTable(w io.Writer) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("Image     %s\n", r.Image)
	p("Digest    %s  (%s, %s)\n", r.Digest, r.Platform, r.Source)
	p("Size      %s compressed, %s uncompressed, %s visible in %d files\n",
		bytesize.Format(r.CompressedSize), bytesize.Format(r.UncompressedSize), bytesize.Format(r.VisibleSize), r.FileCount)
	p("Waste     %s in superseded files; efficiency %.2f%% (dive would report %s wasted)\n",
		bytesize.Format(r.Waste.WastedBytes), 100*r.Waste.Efficiency, bytesize.Format(r.Waste.DiveWastedBytes))
	if !r.Verified {
		p("Digests   NOT verified (--no-verify)\n")
	}
	p("\nLAYERS\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tDIGEST\tCOMPR\tSIZE\tUNCOMPRESSED\tFILES\tWASTED\tFLAGGED\tCREATED BY")
	for _, l := range r.Layers {
		var flagged []string
		for _, c := range classify.AllClasses {
			if c == classify.ClassCUDALibs {
				continue
			}
			if n := l.BytesByClass[string(c)]; n > 0 {
				flagged = append(flagged, fmt.Sprintf("%s %s", c, bytesize.Format(n)))
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", l.Index, shortDigest(l.Digest, l.DiffID), l.Compression,
			bytesize.Format(l.CompressedSize), bytesize.Format(l.UncompressedSize), l.FileCount, bytesize.Format(l.WastedBytes),
			dash(strings.Join(flagged, ", ")), truncate(l.CreatedBy, 60))
	}
	tw.Flush()

	p("\nFINDINGS\n")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tFILES\tSHIPPED\tVISIBLE\tLARGEST")
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", c.Class, c.Files, bytesize.Format(c.Bytes), bytesize.Format(c.VisibleBytes), top)
	}
	tw.Flush()
	for _, c := range r.Classes {
		if c.Files > 0 && c.Class != classify.ClassCUDALibs {
			p("  %-12s fix: %s\n", c.Class, c.Fix)
		}
	}
	if len(r.DuplicateCUDALibs) > 0 {
		p("\nCUDA LIBRARIES SHIPPED TWICE\n")
		for _, d := range r.DuplicateCUDALibs {
			var paths []string
			for _, c := range d.Copies {
				paths = append(paths, c.Path)
			}
			p("  %s: %s wasted (%s)\n", d.Soname, bytesize.Format(d.WastedBytes), strings.Join(paths, ", "))
		}
		p("  fix: %s\n", classify.ClassCUDALibs.Fix())
	}
	if len(r.Waste.Top) > 0 {
		p("\nLARGEST WASTE\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range r.Waste.Top {
			fmt.Fprintf(tw, "  %s\t%s\tlayer %d, %s by layer %d\n", bytesize.Format(f.Size), f.Path, f.Layer, f.How, f.By)
		}
		tw.Flush()
	}
	p("\nCUDA\n")
	c := r.CUDA
	p("  CUDA_VERSION         %s\n", dash(c.CUDAVersion))
	p("  cudart in files      %s\n", dash(c.RuntimeVersion))
	cudnn := dash(c.CuDNNVersion)
	if c.CuDNNSource != "" {
		cudnn += " (" + c.CuDNNSource + ")"
	}
	p("  cuDNN                %s\n", cudnn)
	if c.Requirement != nil {
		p("  NVIDIA_REQUIRE_CUDA  cuda>=%s", dash(c.Requirement.CUDA))
		if len(c.Requirement.DriverBranches) > 0 {
			p(", or forward compat on driver branches %s for brands %s", strings.Join(c.Requirement.DriverBranches, "/"), strings.Join(c.Requirement.Brands, ","))
		}
		p("\n")
	} else {
		p("  NVIDIA_REQUIRE_CUDA  -\n")
	}
	if c.MinDriver != nil {
		p("  minimum host driver  %s (%s with minor-version compatibility, SASS-only code)\n", c.MinDriver.Toolkit, c.MinDriver.MinorVersionCompat)
	}
	if k := r.Kernels; k != nil {
		p("\nKERNELS (device code in %d shared libraries)\n", len(k.Libraries))
		p("  SASS  %s\n", dash(strings.Join(k.SM, " ")))
		p("  PTX   %s\n", dash(strings.Join(k.PTX, " ")))
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
			p("  coverage  SASS on %s; PTX JIT only on %s; no kernel on %s\n", dash(strings.Join(sass, " ")), dash(strings.Join(ptx, " ")), dash(strings.Join(none, " ")))
		}
		// The per-library inventory: the largest lists first would hide
		// the odd one out, so libraries keep path order; long lists are cut.
		const maxLibs = 20
		for i, l := range k.Libraries {
			if i == maxLibs {
				p("  … %d more libraries (--json lists all)\n", len(k.Libraries)-maxLibs)
				break
			}
			p("  %-48s SASS %-24s PTX %s\n", l.Path, dash(strings.Join(l.SM, " ")), dash(strings.Join(l.PTX, " ")))
		}
		for _, g := range k.GPUs {
			verdict := "covered"
			switch {
			case !g.Covered:
				verdict = fmt.Sprintf("NO KERNEL in %d libraries, e.g. %s", len(g.Missing), g.Missing[0])
			case len(g.JIT) > 0:
				verdict = fmt.Sprintf("covered, %d libraries only through PTX JIT (slow first start; driver >= toolkit), e.g. %s", len(g.JIT), g.JIT[0])
			}
			p("  %-18s %-5s %s\n", g.GPU, g.ComputeCapability, verdict)
		}
	}
	if len(r.LargestFiles) > 0 {
		p("\nLARGEST FILES\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range r.LargestFiles[:min(10, len(r.LargestFiles))] {
			note := string(f.Class)
			if f.Deleted {
				note = strings.TrimSpace(note + " (deleted later)")
			}
			fmt.Fprintf(tw, "  %s\t%s\tlayer %d\t%s\n", bytesize.Format(f.Size), f.Path, f.Layer, note)
		}
		tw.Flush()
	}
	for _, wng := range r.Warnings {
		p("warning: %s\n", wng)
	}
	return nil
}

func shortDigest(d, diffID string) string {
	if d == "" {
		d = diffID
	}
	if i := strings.Index(d, ":"); i >= 0 && len(d) > i+13 {
		return d[i+1 : i+13]
	}
	return d
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
