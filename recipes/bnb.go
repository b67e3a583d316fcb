package recipes

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

func (b *BNBRelease) latest() string { return b.Versions[len(b.Versions)-1] }

// bnbLib picks the libbitsandbytes_cudaXY the release loads for torch's CUDA.
func bnbLib(b *BNBRelease, torchCUDA string) (string, bool) {
	if slices.Contains(b.CUDABuilds, torchCUDA) {
		return torchCUDA, false
	}
	if !b.FallbackSame {
		return "", false
	}
	tv := cuda.MustVersion(torchCUDA)
	best := ""
	for _, c := range b.CUDABuilds {
		cv := cuda.MustVersion(c)
		if cv.Major() == tv.Major() && cv.Compare(tv) <= 0 && (best == "" || cuda.CompareVersions(c, best) > 0) {
			best = c
		}
	}
	if best == "" {
		for _, c := range b.CUDABuilds {
			cv := cuda.MustVersion(c)
			if cv.Major() == tv.Major() && (best == "" || cuda.CompareVersions(c, best) < 0) {
				best = c
			}
		}
	}
	return best, best != ""
}

func bnbSASS(b *BNBRelease, lib string) string {
	if s, ok := b.SASS[lib]; ok {
		return s
	}
	if s, ok := b.SASS[itoa(cuda.MustVersion(lib).Major())]; ok {
		return s
	}
	return b.SASS["default"]
}

func (s *resolver) bnbStep() error {
	spec := s.r.BitsAndBytes
	if spec == nil {
		return nil
	}
	if s.tvar == nil {
		return refuse("bitsandbytes", []string{"torch: {version: \"2.5.1\"}"}, "bitsandbytes picks its CUDA library from torch.version.cuda; add a torch section")
	}
	tc := s.tvar.CUDA
	var cands []*BNBRelease
	if spec.Version != "" {
		for i := range s.db.BNB.Releases {
			if slices.Contains(s.db.BNB.Releases[i].Versions, spec.Version) {
				cands = append(cands, &s.db.BNB.Releases[i])
			}
		}
		if len(cands) == 0 {
			var known []string
			for _, r := range s.db.BNB.Releases {
				known = append(known, r.Versions...)
			}
			return refuse("bitsandbytes.version", nil, "kiln has no data for bitsandbytes %s (known: %s)", spec.Version, strings.Join(known, ", "))
		}
	} else {
		for i := len(s.db.BNB.Releases) - 1; i >= 0; i-- {
			cands = append(cands, &s.db.BNB.Releases[i])
		}
	}
	var firstErr *ResolveError
	for _, rel := range cands {
		ver := rel.latest()
		if spec.Version != "" {
			ver = spec.Version
		}
		lib, fallback := bnbLib(rel, tc)
		if lib == "" {
			alts := []string{fmt.Sprintf("set BNB_CUDA_VERSION to one of %s (no fallback before 0.50)", strings.Join(rel.CUDABuilds, ", "))}
			for i := len(s.db.BNB.Releases) - 1; i >= 0; i-- {
				o := &s.db.BNB.Releases[i]
				if l, _ := bnbLib(o, tc); l != "" {
					alts = append([]string{"bitsandbytes " + o.latest()}, alts...)
					break
				}
			}
			if firstErr == nil {
				firstErr = refuse("bitsandbytes.version", alts, "bitsandbytes %s ships no libbitsandbytes_cuda%s.so for torch %s+%s (it has CUDA %s)", ver, strings.ReplaceAll(tc, ".", ""), s.tver, s.tvar.Name, strings.Join(rel.CUDABuilds, ", "))
			}
			continue
		}
		sass := bnbSASS(rel, lib)
		var bad *ResolveError
		for i, g := range s.gpus {
			if cuda.CompareVersions(g.ComputeCapability, rel.MinCC) < 0 {
				bad = refuse(fmt.Sprintf("gpus[%d]", i), nil, "bitsandbytes %s needs compute capability >= %s; %s is %s", ver, rel.MinCC, g.Name, g.ComputeCapability)
				break
			}
			if ok, _ := cuda.Covers(sass, g.ComputeCapability); !ok {
				bad = refuse(fmt.Sprintf("gpus[%d]", i), nil, "bitsandbytes %s's CUDA %s library has no kernels for %s (sm_%s; built for %s)", ver, lib, g.Name, strings.ReplaceAll(g.ComputeCapability, ".", ""), sass)
				break
			}
		}
		if bad == nil && rel.Platforms != nil {
			if p, ok := platformsKnown(rel.Platforms, s.plan.Platforms); !ok {
				var alts []string
				for i := len(s.db.BNB.Releases) - 1; i >= 0; i-- {
					o := &s.db.BNB.Releases[i]
					if _, ok := platformsKnown(o.Platforms, s.plan.Platforms); ok {
						alts = append(alts, "bitsandbytes "+o.latest())
						break
					}
				}
				bad = refuse("platforms", append(alts, "platforms: [linux/amd64]"), "bitsandbytes %s publishes no %s wheels (it has %s)", ver, p, strings.Join(rel.Platforms, ", "))
			}
		}
		if bad != nil {
			if firstErr == nil {
				firstErr = bad
			}
			continue
		}
		if rel.Platforms != nil {
			s.fact(fmt.Sprintf("bitsandbytes %s wheels for %s", ver, strings.Join(rel.Platforms, ", ")), rel.PlatformsSource, rel.PlatformsConfidence)
		} else {
			for _, p := range s.plan.Platforms {
				if p != DefaultPlatform {
					s.warn("kiln has no data on bitsandbytes %s wheels for %s (only x86_64 is confirmed); kiln lock checks the index", ver, p)
				}
			}
		}
		s.plan.BitsAndBytes = strp(ver)
		s.plan.BitsAndBytesLib = strp("libbitsandbytes_cuda" + strings.ReplaceAll(lib, ".", "") + ".so")
		if fallback {
			s.warn("bitsandbytes %s has no CUDA %s build; it falls back to its CUDA %s library", ver, tc, lib)
		}
		for _, g := range s.gpus {
			if cuda.CompareVersions(g.ComputeCapability, s.db.BNB.Int8MinCC) < 0 {
				s.warn("LLM.int8() needs compute capability >= %s; %s (%s) only gets 8-bit optimizers and NF4/FP4", s.db.BNB.Int8MinCC, g.Name, g.ComputeCapability)
			}
		}
		s.fact(fmt.Sprintf("bitsandbytes %s ships CUDA builds %s (SASS %s for %s)", ver, strings.Join(rel.CUDABuilds, ", "), sass, lib), rel.Source, rel.Confidence)
		return nil
	}
	return firstErr
}
