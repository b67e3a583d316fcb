package cuda

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var smRe = regexp.MustCompile(`^(?:sm|compute)_?(\d+)(\d)[af]?$`)
var ccRe = regexp.MustCompile(`^(\d+)\.(\d+)$`)

func normGPU(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func squash(s string) string {
	return strings.NewReplacer("-", "", "_", "", " ", "", ".", "").Replace(strings.ToLower(s))
}

// GPU looks up a GPU by name ("h100", "RTX 4090", "a10g") or architecture
// ("sm_90", "sm90", "9.0").
func GPU(nameOrSM string) (GPUInfo, error) {
	n := normGPU(nameOrSM)
	if n == "" {
		return GPUInfo{}, fmt.Errorf("empty GPU name")
	}
	cc := ""
	if m := smRe.FindStringSubmatch(n); m != nil {
		cc = m[1] + "." + m[2]
	} else if m := ccRe.FindStringSubmatch(n); m != nil {
		cc = m[1] + "." + m[2]
	}
	db := mustDB()
	if cc != "" {
		sm := SM(cc)
		known := false
		for _, a := range db.GPUs.Arch {
			if a.Arch == sm {
				known = true
			}
		}
		var names []string
		for _, g := range db.GPUs.GPUs {
			if g.ComputeCapability == cc {
				names = append(names, g.Name)
			}
		}
		if !known && len(names) == 0 {
			return GPUInfo{}, fmt.Errorf("unknown architecture %s (compute capability %s)", sm, cc)
		}
		info := GPUInfo{Name: sm, ComputeCapability: cc, Source: "architecture given directly", Confidence: ConfA}
		if len(names) > 0 {
			info.Note = "e.g. " + strings.Join(names, ", ")
		}
		return info, nil
	}
	q := squash(n)
	for _, strip := range []string{"", "nvidia", "geforce", "tesla", "nvidiageforce"} {
		qq := strings.TrimPrefix(q, strip)
		for _, g := range db.GPUs.GPUs {
			if squash(g.Name) == qq {
				return g, nil
			}
			for _, a := range g.Aliases {
				if squash(a) == qq {
					return g, nil
				}
			}
		}
	}
	return GPUInfo{}, fmt.Errorf("unknown GPU %q; use a name such as h100, a100, l4, t4, rtx4090, b200 or an architecture such as sm_90", nameOrSM)
}

// SM names compute capability cc the way nvcc and cuobjdump do: "9.0" is
// "sm_90".
func SM(cc string) string { return "sm_" + strings.Replace(cc, ".", "", 1) }

// ArchSupported reports whether CUDA toolkit cuda can compile for compute
// capability cc (e.g. "9.0"), with a reason either way.
func ArchSupported(cuda, cc string) (bool, string, *ArchSupport) {
	sm := SM(cc)
	cv, err := ParseVersion(cuda)
	if err != nil {
		return false, "CUDA version: " + err.Error(), nil
	}
	for i, a := range mustDB().GPUs.Arch {
		if a.Arch != sm {
			continue
		}
		row := &mustDB().GPUs.Arch[i]
		if a.FirstCUDA != "" && cv.Compare(MustVersion(a.FirstCUDA)) < 0 {
			return false, fmt.Sprintf("%s needs CUDA ≥ %s; CUDA %s cannot compile for it", sm, a.FirstCUDA, cuda), row
		}
		if a.LastCUDA != "" && MustVersion(cv.MajorMinor()).Compare(MustVersion(a.LastCUDA)) > 0 {
			why := fmt.Sprintf("CUDA %s dropped %s (last toolkit: %s)", cv.MajorMinor(), sm, a.LastCUDA)
			if a.Note != "" {
				why += "; " + a.Note
			}
			return false, why, row
		}
		rng := "CUDA >= " + a.FirstCUDA
		if a.FirstCUDA == "" {
			rng = "every CUDA 11+ toolkit"
		}
		if a.LastCUDA != "" {
			rng += " through " + a.LastCUDA
		}
		return true, fmt.Sprintf("CUDA %s can compile for %s (supported by %s)", cuda, sm, rng), row
	}
	return false, fmt.Sprintf("kiln has no toolkit data for %s", sm), nil
}

// ccCmp orders compute capabilities numerically.
func ccCmp(a, b string) int { return CompareVersions(a, b) }

// Covers reports whether a list of compiled archs ("8.0;9.0+PTX" or
// "80;90", as TORCH_CUDA_ARCH_LIST and wheel metadata spell them) covers
// compute capability cc: a cubin for X.y runs on X.z with z ≥ y (same
// major); PTX for an older arch JIT-compiles forward (viaPTX).
func Covers(list, cc string) (ok bool, viaPTX bool) {
	want := MustVersion(cc)
	for _, raw := range strings.Split(list, ";") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		ptx := strings.HasSuffix(raw, "+PTX")
		a := strings.TrimSuffix(raw, "+PTX")
		if !strings.Contains(a, ".") {
			n, err := strconv.Atoi(a)
			if err != nil {
				continue
			}
			a = fmt.Sprintf("%d.%d", n/10, n%10)
		}
		av, err := ParseVersion(a)
		if err != nil {
			continue
		}
		if av.Major() == want.Major() && av.Compare(want) <= 0 {
			return true, false
		}
		if ptx && av.Compare(want) <= 0 {
			viaPTX = true
		}
	}
	return viaPTX, viaPTX
}

// ArchList sorts compute capabilities numerically ("8.9" before "10.0")
// and drops repeats.
func ArchList(ccs []string) []string {
	out := slices.Clone(ccs)
	slices.SortFunc(out, ccCmp)
	return slices.Compact(out)
}
