package recipes

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

func orDash(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

// WriteTable prints the plan for humans, a field a line (kiln resolve and
// kiln build --dry-run); --json callers marshal the Plan itself.
func (p *Plan) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "recipe        %s\n", p.Name)
	fmt.Fprintf(w, "cuda          %s\n", p.CUDA)
	fmt.Fprintf(w, "cudnn         %s (%s)\n", orDash(p.CuDNN), p.CuDNNSource)
	fmt.Fprintf(w, "os            %s\n", p.OS)
	switch {
	case p.PythonSource == PythonStandalone && p.PythonDist != nil:
		fmt.Fprintf(w, "python        %s  (CPython %s, python-build-standalone %s, sha256 pinned: %s ships %s)\n", p.Python, p.PythonDist.Version, p.PythonDist.Release, p.OS, osPython(osFlavor(p.OS)))
	case p.PythonSource == PythonOS:
		fmt.Fprintf(w, "python        %s  (%s's python3, apt)\n", p.Python, p.OS)
	default:
		fmt.Fprintf(w, "python        %s\n", p.Python)
	}
	if p.Torch != nil {
		fmt.Fprintf(w, "torch         %s+%s  (index %s, C++11 ABI %v)\n", *p.Torch, *p.TorchCUDAVariant, p.TorchIndexURL, *p.TorchCXX11ABI)
		if p.Torchvision != nil {
			fmt.Fprintf(w, "torchvision   %s\n", *p.Torchvision)
		}
		if p.Torchaudio != nil {
			fmt.Fprintf(w, "torchaudio    %s\n", *p.Torchaudio)
		}
	}
	if p.FlashAttn != nil {
		if p.FlashAttnWheel != nil {
			fmt.Fprintf(w, "flash-attn    %s  wheel %s\n", *p.FlashAttn, *p.FlashAttnWheel)
		} else if b := p.FlashAttnBuild; b != nil {
			fmt.Fprintf(w, "flash-attn    %s  built from source: FLASH_ATTN_CUDA_ARCHS=%s MAX_JOBS=%d (%s)\n", *p.FlashAttn, b.CUDAArchs, b.MaxJobs, b.Reason)
		}
	}
	if p.BitsAndBytes != nil {
		fmt.Fprintf(w, "bitsandbytes  %s  (%s)\n", *p.BitsAndBytes, orDash(p.BitsAndBytesLib))
	}
	var extra []string
	for _, pp := range p.Pip {
		switch {
		case pp.FromSource():
			extra = append(extra, pp.Requirement+" (from source)")
		case !slices.Contains([]string{"torch", "torchvision", "torchaudio", "flash-attn", "bitsandbytes"}, pp.Name):
			extra = append(extra, pp.Requirement)
		}
	}
	// Wrapped at 80 columns, continued under the first item.
	line := "pip           "
	for i, e := range extra {
		if i < len(extra)-1 {
			e += ","
		}
		if i > 0 && len(line)+1+len(e) > 80 {
			fmt.Fprintln(w, line)
			line = strings.Repeat(" ", 13)
		}
		if i > 0 {
			line += " "
		}
		line += e
	}
	if len(extra) > 0 {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "devel image   %s\n", p.BaseImages.Devel)
	fmt.Fprintf(w, "runtime image %s\n", p.BaseImages.Runtime)
	fmt.Fprintf(w, "cuda archs    %s\n", strings.Join(p.CUDAArchs, " "))
	fmt.Fprintf(w, "min driver    %s (toolkit), %s (minor-version compatibility)\n", p.MinDriver.Toolkit, p.MinDriver.MinorVersionCompat)
	fmt.Fprintf(w, "platforms     %s\n", strings.Join(p.Platforms, " "))
	if g := p.GPUCode; g != nil {
		what := "cubins for " + strings.Join(g.Archs, " ")
		if g.KeepPTX {
			what += " + newest PTX"
		}
		scope := "framework and extension libraries"
		if g.NVIDIALibs {
			scope += " and NVIDIA's"
		}
		fmt.Fprintf(w, "gpu code      pruned to %s (%s; gpu_code.prune: false keeps all)\n", what, scope)
	}
	if d := p.Data; d != nil {
		stale := ""
		if d.Stale {
			stale = fmt.Sprintf(", older than %d days: run kiln compat refresh", d.MaxAgeDays)
		}
		fmt.Fprintf(w, "data          %s (%s; torch and nvidia/cuda facts checked %s, %d days ago%s)\n", d.Version, d.Origin, d.Date, d.AgeDays, stale)
	}
}
