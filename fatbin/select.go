package fatbin

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// GPU is one GPU of the fleet: a display name and its compute capability
// as a number (89 for 8.9).
type GPU struct {
	Name string
	CC   int
}

// Select decides which entries of c the fleet needs. For every fleet GPU
// it keeps the cubin that runs on it natively — the newest of its major
// whose minor is not above the GPU's (sm_86 code serves an sm_89 L4) — and
// any arch-specific cubin for exactly that GPU (sm_90a on an H100); where
// there is no such cubin, the newest PTX at or below the GPU, which the
// driver JIT-compiles. With keepPTX the container's newest PTX stays too, so
// a GPU newer than the fleet still starts. Entries that are not Known stay.
//
// missing names the fleet GPUs c has no code for (it never had any: Select
// only drops code a fleet GPU cannot run, or runs less well than what
// stays). A container with code for none of the fleet keeps its newest
// cubin (and the newest PTX with keepPTX) rather than nothing: an empty
// container is not something nvcc writes, and one cubin costs little.
func Select(c *Container, fleet []GPU, keepPTX bool) (keep []bool, missing []string) {
	keep = make([]bool, len(c.Entries))
	for i, e := range c.Entries {
		if !e.Known() {
			keep[i] = true
		}
	}
	keepArch := func(kind Kind, arch int, specific bool) {
		for i, e := range c.Entries {
			if e.Known() && e.Kind == kind && e.Arch == arch && e.ArchSpecific() == specific {
				keep[i] = true
			}
		}
	}
	newestPTX := func(atMost int) int {
		best := -1
		for _, e := range c.Entries {
			if e.Known() && e.Kind == KindPTX && e.Arch <= atMost && e.Arch > best {
				best = e.Arch
			}
		}
		return best
	}
	for _, g := range fleet {
		best, specific := -1, false
		for _, e := range c.Entries {
			if !e.Known() || e.Kind != KindCubin || e.Arch/10 != g.CC/10 {
				continue
			}
			switch {
			case e.ArchSpecific():
				if e.Arch == g.CC {
					specific = true
				}
			case e.Arch%10 <= g.CC%10 && e.Arch > best:
				best = e.Arch
			}
		}
		if specific {
			keepArch(KindCubin, g.CC, true)
		}
		if best >= 0 {
			keepArch(KindCubin, best, false)
			continue
		}
		if p := newestPTX(g.CC); p >= 0 {
			keepArch(KindPTX, p, false)
			continue
		}
		if !specific {
			missing = append(missing, g.Name)
		}
	}
	if len(missing) == len(fleet) {
		// Code for other GPUs only (cuBLAS has Ampere-only kernels): the
		// fleet runs none of it, before or after. One cubin stays, so the
		// container is still one that nvcc writes (a single-arch build).
		best, bestSpecific := -1, -1
		for _, e := range c.Entries {
			if e.Known() && e.Kind == KindCubin {
				if e.ArchSpecific() {
					bestSpecific = max(bestSpecific, e.Arch)
				} else {
					best = max(best, e.Arch)
				}
			}
		}
		switch {
		case best >= 0:
			keepArch(KindCubin, best, false)
		case bestSpecific >= 0:
			keepArch(KindCubin, bestSpecific, true)
		default:
			for i := range keep {
				keep[i] = true
			}
		}
	}
	if keepPTX {
		if p := newestPTX(1 << 30); p >= 0 {
			keepArch(KindPTX, p, false)
		}
	}
	return keep, missing
}

// Edit is the rewrite of one container: which entries stay.
type Edit struct {
	Container Container
	Keep      []bool
}

// NewSize is the container's entry size after the edit.
func (e *Edit) NewSize() int64 {
	var n int64
	for i, ent := range e.Container.Entries {
		if e.Keep[i] {
			n += ent.Len()
		}
	}
	return n
}

// Plan is what pruning does to one file.
type Plan struct {
	// Edits are the containers that change, in file order.
	Edits []Edit
	// Kept and Dropped name the architectures present after and the ones
	// gone entirely (Entry.Name spelling).
	Kept, Dropped []string
	// Zeroed is the number of bytes of dropped entries, now zeros.
	Zeroed int64
	// Containers counts the file's containers; Edited those that changed.
	Containers, Edited int
	// Whole says why the file is left as it is (no edits), when it is.
	Whole string
	// Warnings name containers kept whole inside an edited file.
	Warnings []string
	// Missing counts, per fleet GPU, the containers without code for it
	// (before and after alike).
	Missing map[string]int
}

// PlanFile decides the pruning of a scanned file for a fleet. A file whose
// fat binaries cannot all be read, or that lacks code for a fleet GPU in
// one of them, keeps those containers whole and says so.
func PlanFile(f *File, fleet []GPU, keepPTX bool) *Plan {
	p := &Plan{Containers: len(f.Containers)}
	before, after := map[string]bool{}, map[string]bool{}
	missing := map[string]int{}
	var incomplete, idle int
	elsewhere := map[string]int{} // containers outside registered sections, by section
	for ci := range f.Containers {
		c := &f.Containers[ci]
		for _, e := range c.Entries {
			before[e.Name()] = true
		}
		if !f.Editable(c) {
			if !c.Complete {
				incomplete++
			} else {
				elsewhere[cmp.Or(f.SectionOf(c), "no section")]++
			}
			for _, e := range c.Entries {
				after[e.Name()] = true
			}
			continue
		}
		keep, miss := Select(c, fleet, keepPTX)
		if len(miss) == len(fleet) {
			idle++
		}
		for _, m := range miss {
			missing[m]++
		}
		changed := false
		for i, e := range c.Entries {
			if keep[i] {
				after[e.Name()] = true
			} else {
				changed = true
				p.Zeroed += e.Len()
			}
		}
		if changed {
			p.Edits = append(p.Edits, Edit{Container: *c, Keep: keep})
		}
	}
	switch {
	case len(f.Containers) == 0:
		p.Whole = "no fat binaries"
	case f.Sections == nil:
		p.Whole = "fat binaries in a file whose sections cannot be read (" + f.SectionErr + ")"
	case !f.Registered():
		p.Whole = "fat binaries, but no .nv_fatbin or __nv_relfatbin section: the library loads them itself"
	}
	if p.Whole == "" {
		if incomplete > 0 {
			p.Warnings = append(p.Warnings, fmt.Sprintf("%d of %d fat binaries could not be read to their end: kept whole", incomplete, len(f.Containers)))
		}
		for _, sec := range slices.Sorted(maps.Keys(elsewhere)) {
			p.Warnings = append(p.Warnings, fmt.Sprintf("%d of %d fat binaries lie in %s, where the library picks and loads them itself (the CUDA runtime registers only .nv_fatbin and __nv_relfatbin): kept whole", elsewhere[sec], len(f.Containers), sec))
		}
	}
	if idle > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d of %d fat binaries have code for none of the fleet's GPUs: their newest cubin kept", idle, len(f.Containers)))
	}
	p.Missing = missing
	// The guarantee, checked rather than assumed: every fleet GPU the file
	// had code for still has code, native code where it had native code.
	if p.Whole == "" {
		for _, g := range fleet {
			bs, bj := serves(f, nil, g)
			as, aj := serves(f, p.Edits, g)
			if bs && !as || (bs || bj) && !(as || aj) {
				p.Whole = "pruning would leave " + g.Name + " without code it had"
			}
		}
	}
	if p.Whole != "" {
		p.Edits, p.Zeroed = nil, 0
		for k := range before {
			after[k] = true
		}
	}
	p.Edited = len(p.Edits)
	p.Kept = sortedNames(after)
	gone := map[string]bool{}
	for k := range before {
		if !after[k] {
			gone[k] = true
		}
	}
	p.Dropped = sortedNames(gone)
	return p
}

// NewGPU makes a fleet GPU from a compute capability "MAJOR.MINOR" (as the
// compatibility database gives it); name labels it in reports.
func NewGPU(name, cc string) (GPU, error) {
	maj, mnr, ok := strings.Cut(cc, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(mnr)
	if !ok || err1 != nil || err2 != nil || a < 1 || b < 0 || b > 9 {
		return GPU{}, fmt.Errorf("GPU %s: compute capability %q: want MAJOR.MINOR such as 9.0", name, cc)
	}
	return GPU{Name: name, CC: a*10 + b}, nil
}

// serves says whether some entry of f, after edits, runs natively (sass)
// or through JIT on g.
func serves(f *File, edits []Edit, g GPU) (sass, jit bool) {
	dropped := map[int64]bool{}
	for _, ed := range edits {
		for i, e := range ed.Container.Entries {
			if !ed.Keep[i] {
				dropped[e.Off] = true
			}
		}
	}
	for _, c := range f.Containers {
		for _, e := range c.Entries {
			if dropped[e.Off] {
				continue
			}
			switch {
			case e.Kind == KindCubin && e.Arch/10 == g.CC/10 && (e.ArchSpecific() && e.Arch == g.CC || !e.ArchSpecific() && e.Arch%10 <= g.CC%10):
				sass = true
			case e.Kind == KindPTX && e.Arch <= g.CC:
				jit = true
			}
		}
	}
	return sass, jit
}
