package analyze

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/fatbin"
)

// kernelArchs is the device code found in one file: the architectures of
// its cubins and of its PTX (fatbin.Scan reads them).
type kernelArchs struct {
	sm, ptx map[int]bool
}

func (k *kernelArchs) empty() bool { return k == nil || len(k.sm)+len(k.ptx) == 0 }

// isSharedObject says whether a file is worth scanning for device code.
func isSharedObject(p string) bool { return fatbin.IsSharedObject(p) }

// scanFatbins streams r through the fat-binary reader and collects the
// architectures of every cubin and PTX it found.
func scanFatbins(r io.Reader) (*kernelArchs, error) {
	f, err := fatbin.Scan(r)
	if err != nil {
		return nil, err
	}
	k := &kernelArchs{sm: map[int]bool{}, ptx: map[int]bool{}}
	for _, c := range f.Containers {
		for _, e := range c.Entries {
			switch e.Kind {
			case fatbin.KindCubin:
				k.sm[e.Arch] = true
			case fatbin.KindPTX:
				k.ptx[e.Arch] = true
			}
		}
	}
	return k, nil
}

// KernelReport describes the device code in the image's shared libraries:
// which GPU architectures have SASS (cubins) and which only PTX, and, for
// target GPUs, which libraries would need PTX JIT or have no kernel at all
// ("no kernel image is available for execution on the device").
type KernelReport struct {
	// SM lists every cubin architecture found ("sm_80"), PTX every PTX
	// version ("compute_90").
	SM        []string     `json:"sm"`
	PTX       []string     `json:"ptx"`
	Libraries []KernelLib  `json:"libraries"`
	GPUs      []GPUSupport `json:"gpus"`
	// Coverage is the image's overall coverage of every GPU architecture
	// the compatibility database knows: whether all libraries with device
	// code run there from SASS, some only through PTX JIT, or some not at
	// all. Empty when no library has device code.
	Coverage []ArchCoverage `json:"coverage"`
}

// ArchCoverage is the image's verdict for one GPU architecture.
type ArchCoverage struct {
	Arch              string `json:"arch"` // sm_90
	ComputeCapability string `json:"compute_capability"`
	// Runs is "sass" (every library has a cubin that runs there), "ptx"
	// (every library runs, some only through PTX JIT) or "none" (some
	// library has no kernel for it).
	Runs string `json:"runs"`
	// GPUs names the database's GPUs of that architecture.
	GPUs []string `json:"gpus"`
}

// Coverage verdicts.
const (
	RunsSASS = "sass"
	RunsPTX  = "ptx"
	RunsNone = "none"
)

// KernelLib is one shared library with device code.
type KernelLib struct {
	Path  string   `json:"path"`
	Layer int      `json:"layer"`
	SM    []string `json:"sm"`
	PTX   []string `json:"ptx"`
}

// GPUSupport is the verdict for one target GPU.
type GPUSupport struct {
	GPU               string `json:"gpu"`
	ComputeCapability string `json:"compute_capability"`
	// Covered is true when every library with device code has a cubin
	// that runs on the GPU or PTX the driver can JIT.
	Covered bool `json:"covered"`
	// JIT lists libraries that run only through PTX JIT: slower first
	// start, and the driver must be at least as new as the toolkit.
	JIT []string `json:"jit"`
	// Missing lists libraries with no kernel for the GPU.
	Missing []string `json:"missing"`
}

func archNames(m map[int]bool, prefix string) []string {
	var a []int
	for v := range m {
		a = append(a, v)
	}
	sort.Ints(a)
	out := make([]string, 0, len(a))
	for _, v := range a {
		out = append(out, prefix+strconv.Itoa(v))
	}
	return out
}

// runsOn reports how code in k runs on compute capability cc (e.g. 89):
// a cubin runs on the same major and a newer-or-equal minor; PTX JIT-
// compiles for any newer GPU.
func runsOn(k *kernelArchs, cc int) (sass, jit bool) {
	for a := range k.sm {
		if a/10 == cc/10 && a%10 <= cc%10 {
			sass = true
		}
	}
	for a := range k.ptx {
		if a <= cc {
			jit = true
		}
	}
	return sass, jit
}

// ParseGPUTargets resolves GPU names or sm_XX into the compatibility
// database's GPUs.
func ParseGPUTargets(names []string) ([]cuda.GPUInfo, error) {
	var out []cuda.GPUInfo
	for _, n := range names {
		g, err := cuda.GPU(n)
		if err != nil {
			return nil, fmt.Errorf("--gpu %s: %v", n, err)
		}
		out = append(out, g)
	}
	return out, nil
}

// libArchs turns a library's listed architectures back into numbers.
func libArchs(l KernelLib) *kernelArchs {
	k := &kernelArchs{sm: map[int]bool{}, ptx: map[int]bool{}}
	for _, s := range l.SM {
		if n, err := strconv.Atoi(strings.TrimPrefix(s, "sm_")); err == nil {
			k.sm[n] = true
		}
	}
	for _, s := range l.PTX {
		if n, err := strconv.Atoi(strings.TrimPrefix(s, "compute_")); err == nil {
			k.ptx[n] = true
		}
	}
	return k
}

// Support says how the libraries run on a GPU of compute capability cc
// ("9.0"); name labels the result. The host check calls it for the GPUs
// it finds, after the scan.
func (k *KernelReport) Support(name, cc string) (GPUSupport, error) {
	n, err := ccNumber(cc)
	if err != nil {
		return GPUSupport{}, err
	}
	archs := make([]*kernelArchs, len(k.Libraries))
	for i, l := range k.Libraries {
		archs[i] = libArchs(l)
	}
	return support(k.Libraries, archs, name, cc, n), nil
}

func ccNumber(cc string) (int, error) {
	maj, min, ok := strings.Cut(cc, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil || b > 9 {
		return 0, fmt.Errorf("compute capability %q: want MAJOR.MINOR such as 9.0", cc)
	}
	return a*10 + b, nil
}

func support(libs []KernelLib, archs []*kernelArchs, name, cc string, n int) GPUSupport {
	gs := GPUSupport{GPU: name, ComputeCapability: cc, JIT: []string{}, Missing: []string{}}
	for i, k := range archs {
		sass, jit := runsOn(k, n)
		switch {
		case sass:
		case jit:
			gs.JIT = append(gs.JIT, libs[i].Path)
		default:
			gs.Missing = append(gs.Missing, libs[i].Path)
		}
	}
	gs.Covered = len(gs.Missing) == 0
	return gs
}

// coverage classifies every architecture of the GPU table.
func coverage(libs []KernelLib, archs []*kernelArchs) []ArchCoverage {
	out := []ArchCoverage{}
	if len(libs) == 0 {
		return out
	}
	db, err := cuda.Data()
	if err != nil {
		return out
	}
	byCC := map[string][]string{}
	var ccs []string
	for _, g := range db.GPUs.GPUs {
		if _, ok := byCC[g.ComputeCapability]; !ok {
			ccs = append(ccs, g.ComputeCapability)
		}
		byCC[g.ComputeCapability] = append(byCC[g.ComputeCapability], g.Name)
	}
	nums := map[string]int{}
	for _, cc := range ccs {
		nums[cc], _ = ccNumber(cc)
	}
	sort.Slice(ccs, func(a, b int) bool { return nums[ccs[a]] < nums[ccs[b]] })
	for _, cc := range ccs {
		gs := support(libs, archs, "", cc, nums[cc])
		runs := RunsSASS
		switch {
		case !gs.Covered:
			runs = RunsNone
		case len(gs.JIT) > 0:
			runs = RunsPTX
		}
		out = append(out, ArchCoverage{Arch: "sm_" + strconv.Itoa(nums[cc]), ComputeCapability: cc, Runs: runs, GPUs: byCC[cc]})
	}
	return out
}

func kernelReport(libs []KernelLib, archs []*kernelArchs, gpus []cuda.GPUInfo) *KernelReport {
	kr := &KernelReport{Libraries: libs, GPUs: []GPUSupport{}, Coverage: coverage(libs, archs)}
	sm, ptx := map[int]bool{}, map[int]bool{}
	for _, k := range archs {
		for a := range k.sm {
			sm[a] = true
		}
		for a := range k.ptx {
			ptx[a] = true
		}
	}
	kr.SM, kr.PTX = archNames(sm, "sm_"), archNames(ptx, "compute_")
	for _, g := range gpus {
		cc, err := ccNumber(g.ComputeCapability)
		if err != nil {
			continue
		}
		kr.GPUs = append(kr.GPUs, support(libs, archs, g.Name, g.ComputeCapability, cc))
	}
	return kr
}

// toolingLibRe names libraries whose device code serves profiling and
// debugging, not the application's compute: a GPU they lack code for still
// runs the container.
var toolingLibRe = regexp.MustCompile(`/lib(cupti|nvperf_host|nvperf_target|pcsamplingutil|checkpoint|accinj64|cuinj64)\.so[^/]*$`)

// SplitTooling separates profiling and debugging libraries (CUPTI, the
// injection and checkpoint libraries) from the libraries that compute.
func SplitTooling(libs []string) (tooling, compute []string) {
	for _, l := range libs {
		if toolingLibRe.MatchString(l) {
			tooling = append(tooling, l)
		} else {
			compute = append(compute, l)
		}
	}
	return tooling, compute
}
