package slim

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
)

// GPUCodeReport accounts for fat-binary pruning (Options.GPUs): per kept
// library, the GPU code that stayed and went. Libraries keep their size
// (dropped code becomes zeros inside the file), so the saving shows in the
// compressed layers; ZeroedBytes is the uncompressed code removed.
type GPUCodeReport struct {
	Fleet   []string `json:"fleet"` // "h100 (sm_90)"
	KeepPTX bool     `json:"keep_ptx"`
	// NVIDIALibraries says NVIDIA's redistributable libraries were pruned
	// too (--prune-nvidia-libs); License is the note that goes with it.
	NVIDIALibraries bool         `json:"nvidia_libraries"`
	License         string       `json:"license"`
	ZeroedBytes     int64        `json:"zeroed_bytes"`
	Libraries       []GPULibrary `json:"libraries"`
	// NotPruned are NVIDIA libraries left as they are without the opt-in,
	// with what pruning them would zero.
	NotPruned []GPULibrary `json:"not_pruned"`
}

// GPULibrary is one shared library with device code.
type GPULibrary struct {
	Path        string   `json:"path"`
	Bytes       int64    `json:"bytes"`
	Kept        []string `json:"kept"`
	Dropped     []string `json:"dropped"`
	ZeroedBytes int64    `json:"zeroed_bytes"`
	FatBinaries int      `json:"fat_binaries"`
	Edited      int      `json:"edited"`
	// Whole says why the library was left as it is, when it was.
	Whole    string   `json:"whole,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// NVIDIALicenseNote and NVIDIAOptInNote are the report's license line
// with and without the opt-in.
const NVIDIALicenseNote = "NVIDIA's redistributable libraries were modified (GPU code removed): whether their license allows distributing modified copies is your call"

const NVIDIAOptInNote = "NVIDIA's redistributable libraries (cuBLAS, cuDNN, NCCL, cuFFT, ...) are left whole; --prune-nvidia-libs prunes them too if their license allows you to ship modified copies"

// IsNVIDIALib reports NVIDIA's own redistributable libraries: the CUDA
// libraries by name, anything under a CUDA toolkit root, and the PyPI
// nvidia-* wheels' site-packages/nvidia tree (p relative to the root,
// without a leading slash).
func IsNVIDIALib(p string) bool {
	return classify.IsCUDALibName(path.Base(p)) || classify.InCUDARoot(p) ||
		strings.Contains(p, "site-packages/nvidia/") || strings.Contains(p, "dist-packages/nvidia/")
}

// gpuScan reports whether the first pass reads p's fat binaries.
func (o *Options) gpuScan(p string, head []byte) bool {
	return len(o.GPUs) > 0 && isELF(head) && fatbin.IsSharedObject(p)
}

// gpuPrunes reports whether p's plan is applied (the opt-in for NVIDIA's).
func (o *Options) gpuPrunes(p string) bool {
	return o.PruneNVIDIA || !IsNVIDIALib(p)
}

// fatScan runs the fat-binary scan beside the first pass's other readers.
type fatScan struct {
	pw   *io.PipeWriter
	done chan struct{}
	f    *fatbin.File
	err  error
}

func newFatScan() *fatScan {
	pr, pw := io.Pipe()
	s := &fatScan{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.f, s.err = fatbin.Scan(pr)
		pr.CloseWithError(s.err)
	}()
	return s
}

func (s *fatScan) Write(p []byte) (int, error) { return s.pw.Write(p) }

// finish ends the stream and plans the file's pruning.
func (s *fatScan) finish(opt *Options) (*fatbin.Plan, error) {
	s.pw.Close()
	<-s.done
	if s.err != nil {
		return nil, s.err
	}
	if len(s.f.Containers) == 0 {
		return nil, nil
	}
	return fatbin.PlanFile(s.f, opt.GPUs, !opt.DropPTX), nil
}

// abort stops the scan goroutine after a failed read.
func (s *fatScan) abort(err error) {
	s.pw.CloseWithError(err)
	<-s.done
}

// gpuCode fills the report's GPU section from the kept files' plans and
// decides which plans the second pass applies.
func (pl *plan) gpuCode(scans []*layerScan, opt *Options) {
	if len(opt.GPUs) == 0 {
		return
	}
	g := NewGPUCodeReport(opt.GPUs, !opt.DropPTX, opt.PruneNVIDIA)
	for _, s := range scans {
		for _, r := range s.recs {
			if r.fat == nil {
				continue
			}
			a := pl.actions[r.layer][r.ord]
			if a == nil || a.op != opEmit {
				continue
			}
			if g.Add("/"+r.path, r.size, r.fat, opt.gpuPrunes(r.path)) {
				a.fat = r.fat
			}
		}
	}
	// Hardlinks written as files carry their content's plan.
	for _, acts := range pl.actions {
		for _, a := range acts {
			if a != nil && a.op == opMaterialize && a.src != nil && a.src.fat != nil && len(a.src.fat.Edits) > 0 && opt.gpuPrunes(a.src.path) {
				a.fat = a.src.fat
			}
		}
	}
	g.Sort()
	pl.report.GPUCode = g
}

// NewGPUCodeReport starts the report of a pruning for fleet.
func NewGPUCodeReport(fleet []fatbin.GPU, keepPTX, nvidia bool) *GPUCodeReport {
	g := &GPUCodeReport{KeepPTX: keepPTX, NVIDIALibraries: nvidia, License: NVIDIAOptInNote, Libraries: []GPULibrary{}, NotPruned: []GPULibrary{}}
	if nvidia {
		g.License = NVIDIALicenseNote
	}
	for _, gpu := range fleet {
		g.Fleet = append(g.Fleet, fmt.Sprintf("%s (sm_%s)", gpu.Name, strconv.Itoa(gpu.CC)))
	}
	return g
}

// Add records one library's plan: among the pruned when applied, else
// among those left as they are. It reports whether the plan changes the
// file (applied and with edits).
func (g *GPUCodeReport) Add(path string, size int64, p *fatbin.Plan, applied bool) bool {
	lib := GPULibrary{Path: path, Bytes: size, Kept: p.Kept, Dropped: p.Dropped, ZeroedBytes: p.Zeroed,
		FatBinaries: p.Containers, Edited: p.Edited, Whole: p.Whole, Warnings: p.Warnings}
	if !applied {
		g.NotPruned = append(g.NotPruned, lib)
		return false
	}
	g.Libraries = append(g.Libraries, lib)
	g.ZeroedBytes += p.Zeroed
	return len(p.Edits) > 0
}

// Sort orders the libraries by bytes zeroed, largest first, then path.
func (g *GPUCodeReport) Sort() {
	for _, l := range [][]GPULibrary{g.Libraries, g.NotPruned} {
		sort.SliceStable(l, func(i, j int) bool {
			if l[i].ZeroedBytes != l[j].ZeroedBytes {
				return l[i].ZeroedBytes > l[j].ZeroedBytes
			}
			return l[i].Path < l[j].Path
		})
	}
}

// ParseFleet resolves GPU names ("h100", "l4") or architectures ("sm_90")
// through the compatibility database into a fleet for Options.GPUs.
func ParseFleet(names []string) ([]fatbin.GPU, error) {
	var out []fatbin.GPU
	seen := map[int]bool{}
	for _, n := range names {
		info, err := cuda.GPU(n)
		if err != nil {
			return nil, err
		}
		g, err := fatbin.NewGPU(n, info.ComputeCapability)
		if err != nil {
			return nil, err
		}
		if !seen[g.CC] {
			seen[g.CC] = true
			out = append(out, g)
		}
	}
	return out, nil
}

// WriteTable prints the report for humans, each line wrapped within
// the width opts give (80 by default), continued under itself.
func (g *GPUCodeReport) WriteTable(w io.Writer, opts ...termtable.Option) {
	o := termtable.Resolve(opts...)
	line := func(first, indent, s string) { termtable.Fprintw(w, o.Width, first, indent, s) }
	ptx := "newest PTX kept"
	if !g.KeepPTX {
		ptx = "PTX dropped where a cubin serves the fleet"
	}
	line("", "  ", fmt.Sprintf("GPU code pruned for %s (%s): %s zeroed in %d libraries", strings.Join(g.Fleet, ", "), ptx, bytesize.Format(g.ZeroedBytes), len(g.Libraries)))
	for _, l := range g.Libraries[:min(len(g.Libraries), 10)] {
		line(fmt.Sprintf("  %10s  ", bytesize.Format(l.ZeroedBytes)), "              ", fmt.Sprintf("%s: kept %s; dropped %s (%d/%d fat binaries edited)", l.Path, strings.Join(l.Kept, " "), orNone(l.Dropped), l.Edited, l.FatBinaries))
		if l.Whole != "" {
			line("              ", "                ", "left whole: "+l.Whole)
		}
		for _, wn := range l.Warnings {
			line("              ", "                ", wn)
		}
	}
	if len(g.NotPruned) > 0 {
		var zero int64
		for _, l := range g.NotPruned {
			zero += l.ZeroedBytes
		}
		line("  ", "    ", fmt.Sprintf("not pruned: %d NVIDIA libraries, %s of GPU code the fleet does not run", len(g.NotPruned), bytesize.Format(zero)))
	}
	line("  ", "    ", g.License)
}
