package recipes

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

// The resolver's torch, CUDA and GPU steps: which GPUs, which torch
// release and CUDA variant serve them, and the architectures to build for.

// gpusStep reads the recipe's GPUs (their compute capabilities) and,
// unless gpu_code.prune is false, the GPU code the image keeps for them.
func (s *resolver) gpusStep() error {
	for i, g := range s.r.GPUs {
		info, err := cuda.GPU(g)
		if err != nil {
			return refuse(fmt.Sprintf("gpus[%d]", i), nil, "%v", err)
		}
		s.gpus = append(s.gpus, info)
		s.plan.GPUs = append(s.plan.GPUs, PlanGPU{Name: info.Name, ComputeCapability: info.ComputeCapability})
		s.fact(fmt.Sprintf("%s is compute capability %s", info.Name, info.ComputeCapability), info.Source, info.Confidence)
	}
	if len(s.gpus) == 0 {
		s.warn("no target gpus: kiln cannot check that the wheels have kernels for your GPUs; set gpus (e.g. [h100] or [sm_90])")
		return nil
	}
	if c := s.r.GPUCode; c == nil || c.Prune == nil || *c.Prune {
		gc := &PlanGPUCode{KeepPTX: true}
		if c != nil {
			gc.NVIDIALibs = c.NVIDIALibs
			if c.KeepPTX != nil {
				gc.KeepPTX = *c.KeepPTX
			}
		}
		var ccs []string
		for _, g := range s.gpus {
			ccs = append(ccs, g.ComputeCapability)
		}
		for _, cc := range cuda.ArchList(ccs) {
			gc.Archs = append(gc.Archs, cuda.SM(cc))
		}
		s.plan.GPUCode = gc
	}
	return nil
}

func (s *resolver) torchRelease(minor string) *TorchRelease {
	for i := range s.db.Torch.Releases {
		if s.db.Torch.Releases[i].Minor == minor {
			return &s.db.Torch.Releases[i]
		}
	}
	return nil
}

func (t *TorchRelease) variant(name string) *TorchVariant {
	for i := range t.Variants {
		if t.Variants[i].Name == name {
			return &t.Variants[i]
		}
	}
	return nil
}

// official is the variant name when PyTorch's release matrix lists it.
func (t *TorchRelease) official(name string) *TorchVariant {
	if v := t.variant(name); v != nil && !v.Unofficial {
		return v
	}
	return nil
}

// variantNames are the release's official variants, the ones kiln offers.
func variantNames(t *TorchRelease) []string {
	var out []string
	for _, v := range t.Variants {
		if !v.Unofficial {
			out = append(out, v.Name)
		}
	}
	return out
}

func cudaVariant(ver string) string {
	v := cuda.MustVersion(ver)
	return fmt.Sprintf("cu%d%d", v.Major(), v[1])
}

// newestTag returns the newest known nvidia/cuda tag for a CUDA X.Y.
func (s *resolver) newestTag(mm string) string {
	best := ""
	for _, t := range s.db.Images.Tags {
		if cuda.MajorMinor(t.CUDA) == mm && (best == "" || cuda.CompareVersions(t.CUDA, best) > 0) {
			best = t.CUDA
		}
	}
	return best
}

func (s *resolver) imageTag(cuda string) *ImageTag {
	for i := range s.db.Images.Tags {
		if s.db.Images.Tags[i].CUDA == cuda {
			return &s.db.Images.Tags[i]
		}
	}
	return nil
}

// gpuFitsVariant checks that a torch variant has kernels for every GPU. A
// variant without arch data (one a refresh found) is not refused here; the
// plan warns instead (archStep).
func (s *resolver) gpuFitsVariant(tv *TorchVariant) (string, bool) {
	if tv.Archs == "" {
		return "", true
	}
	for _, g := range s.gpus {
		if ok, _ := cuda.Covers(tv.Archs, g.ComputeCapability); !ok {
			return fmt.Sprintf("%s (sm_%s)", g.Name, strings.ReplaceAll(g.ComputeCapability, ".", "")), false
		}
	}
	return "", true
}

func (s *resolver) torchAndCUDA() error {
	r := s.r
	if r.CUDA != "" {
		v := cuda.MustVersion(r.CUDA)
		if v.MajorMinor() == "12.7" {
			return refuse("cuda", []string{"cuda: \"12.6\"", "cuda: \"12.8\""}, "there is no CUDA 12.7 (12.6 Update 3 is followed by 12.8 GA)")
		}
		if _, err := cuda.MinDriver(r.CUDA); err != nil {
			return refuse("cuda", nil, "%v", err)
		}
	}
	if r.Torch == nil {
		cuda := r.CUDA
		if cuda == "" {
			return refuse("cuda", []string{"cuda: \"12.8\"", "torch: {version: \"2.7.1\"}"}, "set cuda or torch: a recipe without torch needs a CUDA version")
		}
		return s.setCUDA(cuda)
	}
	t := r.Torch
	var releases []*TorchRelease
	if t.Version != "" {
		mm := cuda.MajorMinor(t.Version)
		rel := s.torchRelease(mm)
		if rel == nil {
			var known []string
			for _, x := range s.db.Torch.Releases {
				known = append(known, x.Minor)
			}
			newest := known[len(known)-1]
			if cuda.CompareVersions(mm, newest) > 0 {
				return s.newerThanData(t.Version, newest)
			}
			return refuse("torch.version", []string{"torch " + newest}, "kiln has no data for torch %s (known: %s)", t.Version, strings.Join(known, ", "))
		}
		if strings.Count(t.Version, ".") == 2 && !slices.Contains(rel.Patches, t.Version) {
			newest := rel.Patches[len(rel.Patches)-1]
			// Patch releases come in the months after a minor release:
			// a higher patch of one of the two newest minors may be out.
			rels := s.db.Torch.Releases
			recent := len(rels) < 3 || cuda.CompareVersions(mm, rels[len(rels)-2].Minor) >= 0
			if recent && cuda.CompareVersions(t.Version, newest) > 0 {
				return s.newerThanData(t.Version, newest)
			}
			return refuse("torch.version", []string{"torch " + newest}, "torch %s is not a known release (known %s.x: %s)", t.Version, mm, strings.Join(rel.Patches, ", "))
		}
		releases = []*TorchRelease{rel}
	} else {
		for i := len(s.db.Torch.Releases) - 1; i >= 0; i-- {
			releases = append(releases, &s.db.Torch.Releases[i])
		}
	}
	var firstErr error
	for _, rel := range releases {
		err := s.tryTorch(rel)
		if err == nil {
			return nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if t.Version == "" && r.CUDA == "" && len(s.gpus) == 0 {
			break
		}
	}
	if t.Version == "" && firstErr != nil {
		if re, ok := firstErr.(*ResolveError); ok && r.CUDA != "" {
			return refuse("torch", re.Alternatives, "no torch release kiln knows fits cuda %s%s (newest tried: %s)", r.CUDA, s.gpuSuffix(), re.Reason)
		}
	}
	return firstErr
}

func (s *resolver) gpuSuffix() string {
	if len(s.gpus) == 0 {
		return ""
	}
	var n []string
	for _, g := range s.gpus {
		n = append(n, g.Name)
	}
	return " and " + strings.Join(n, ", ")
}

// tryTorch picks the variant of rel for the recipe, or says why none fits.
func (s *resolver) tryTorch(rel *TorchRelease) error {
	r, t := s.r, s.r.Torch
	var cands []*TorchVariant
	switch {
	case t.Variant != "":
		tv := rel.variant(t.Variant)
		if tv == nil {
			return refuse("torch.variant", []string{"variant: " + strings.Join(variantNames(rel), ", variant: ")}, "torch %s has no %s wheels (it has %s)", rel.Minor, t.Variant, strings.Join(variantNames(rel), ", "))
		}
		if tv.Unofficial {
			s.warn("torch %s+%s is on the wheel index but not in PyTorch's release matrix (unofficial): used because torch.variant asks for it", rel.Minor, tv.Name)
		}
		if r.CUDA != "" {
			iv, vv := cuda.MustVersion(r.CUDA), cuda.MustVersion(tv.CUDA)
			if iv.Major() != vv.Major() {
				return refuse("torch.variant", []string{fmt.Sprintf("cuda: %q", tv.CUDA)}, "torch %s+%s is built for CUDA %s but the image is CUDA %s: extensions (FlashAttention, custom ops) fail to build when nvcc's major differs from torch's", rel.Minor, tv.Name, tv.CUDA, r.CUDA)
			}
			if vv.Compare(cuda.MustVersion(iv.MajorMinor())) != 0 {
				s.warn("torch %s+%s (CUDA %s) on a CUDA %s image: torch brings its own CUDA libraries; nvcc minor mismatch only warns when building extensions", rel.Minor, tv.Name, tv.CUDA, iv.MajorMinor())
			}
		}
		cands = []*TorchVariant{tv}
	case r.CUDA != "":
		want := cudaVariant(r.CUDA)
		tv := rel.official(want)
		if tv == nil {
			return s.noVariant(rel, want)
		}
		cands = []*TorchVariant{tv}
	default:
		// Newest stable variant first, then experimental ones.
		for i := len(rel.Variants) - 1; i >= 0; i-- {
			if rel.Variants[i].Stable && !rel.Variants[i].Unofficial {
				cands = append(cands, &rel.Variants[i])
			}
		}
		for i := len(rel.Variants) - 1; i >= 0; i-- {
			if !rel.Variants[i].Stable && !rel.Variants[i].Unofficial {
				cands = append(cands, &rel.Variants[i])
			}
		}
	}
	var lastErr error
	for _, tv := range cands {
		if g, ok := s.gpuFitsVariant(tv); !ok {
			var alts []string
			for _, o := range rel.Variants {
				if _, ok := s.gpuFitsVariant(&o); ok && o.Name != tv.Name && !o.Unofficial {
					alts = append(alts, fmt.Sprintf("torch %s with cuda %s (%s)", rel.Minor, o.CUDA, o.Name))
				}
			}
			lastErr = refuse("gpus", alts, "torch %s+%s wheels have no kernels for %s (compiled for %s)", rel.Minor, tv.Name, g, tv.Archs)
			continue
		}
		cudaVer := r.CUDA
		if cudaVer == "" {
			cudaVer = s.newestTag(tv.CUDA)
			if cudaVer == "" {
				cudaVer = tv.CUDA
			}
		}
		// Toolkit must be able to target every GPU (checked again in archStep with the final version).
		okArch := true
		for _, g := range s.gpus {
			if ok, why, _ := cuda.ArchSupported(cudaVer, g.ComputeCapability); !ok {
				lastErr = refuse("gpus", nil, "%s: %s", g.Name, why)
				okArch = false
				break
			}
		}
		if !okArch {
			continue
		}
		s.torch, s.tvar = rel, tv
		s.tver = rel.Patches[len(rel.Patches)-1]
		if t.Version != "" && strings.Count(t.Version, ".") == 2 {
			s.tver = t.Version
		}
		if !tv.Stable && !tv.Unofficial {
			s.warn("torch %s+%s is an experimental CUDA variant in PyTorch's release matrix", rel.Minor, tv.Name)
		}
		return s.setCUDA(cudaVer)
	}
	return lastErr
}

func (s *resolver) noVariant(rel *TorchRelease, want string) error {
	var alts []string
	var cudas []string
	for _, v := range rel.Variants {
		if !v.Unofficial && cuda.MustVersion(v.CUDA).Major() == cuda.MustVersion(s.r.CUDA).Major() {
			cudas = append(cudas, fmt.Sprintf("%q", v.CUDA))
		}
	}
	if len(cudas) == 0 {
		for _, v := range rel.Variants {
			if !v.Unofficial {
				cudas = append(cudas, fmt.Sprintf("%q", v.CUDA))
			}
		}
	}
	alts = append(alts, fmt.Sprintf("cuda: %s with torch %s", strings.Join(cudas, " or "), rel.Minor))
	var others []string
	for i := len(s.db.Torch.Releases) - 1; i >= 0 && len(others) < 2; i-- {
		o := &s.db.Torch.Releases[i]
		if o.official(want) != nil {
			others = append(others, o.Minor)
		}
	}
	if len(others) > 0 {
		alts = append(alts, fmt.Sprintf("torch %s with cuda %s", strings.Join(others, " or "), cuda.MajorMinor(s.r.CUDA)))
	}
	s.fact(fmt.Sprintf("torch %s wheel variants: %s", rel.Minor, strings.Join(variantNames(rel), ", ")), rel.Source, rel.Confidence)
	if u := rel.variant(want); u != nil {
		// On the index, not in the release matrix: say so, and how to opt in.
		alts = append(alts, fmt.Sprintf("torch: {version: %q, variant: %s} to use the unofficial wheels anyway", rel.Patches[len(rel.Patches)-1], want))
		src := u.Source
		if src == "" {
			src = rel.Source
		}
		return refuse("torch.version", alts, "torch %s+%s wheels are on the wheel index but not in PyTorch's release matrix (unofficial; %s); kiln does not pick them unless torch.variant asks (official: %s)", rel.Minor, want, src, strings.Join(variantNames(rel), ", "))
	}
	return refuse("torch.version", alts, "torch %s has no %s wheels (it has %s)", rel.Minor, want, strings.Join(variantNames(rel), ", "))
}

func (s *resolver) setCUDA(cudaVer string) error {
	v := cuda.MustVersion(cudaVer)
	if len(v) == 2 {
		if t := s.newestTag(cudaVer); t != "" {
			cudaVer = t
		} else {
			cudaVer = cudaVer + ".0"
			s.warn("kiln has no nvidia/cuda image data for CUDA %s; assuming tag %s exists (check the registry)", v.MajorMinor(), cudaVer)
		}
	} else if s.imageTag(cudaVer) == nil {
		s.warn("nvidia/cuda:%s is not in kiln's image data (known %s tag: %s); the tag may not exist or may have been deleted", cudaVer, v.MajorMinor(), orNone(s.newestTag(v.MajorMinor())))
	}
	dr, err := cuda.MinDriver(cudaVer)
	if err != nil {
		return refuse("cuda", nil, "%v", err)
	}
	s.plan.CUDA = cudaVer
	s.plan.MinDriver = PlanMinDriver{Toolkit: dr.Toolkit, MinorVersionCompat: dr.MinorVersionCompat}
	s.fact(fmt.Sprintf("CUDA %s needs Linux driver >= %s", dr.CUDA, dr.Toolkit), dr.Source, dr.Confidence)
	if dr.MVCSource != "" {
		s.fact(fmt.Sprintf("CUDA %d.x minor-version compatibility needs driver >= %s", v.Major(), dr.MinorVersionCompat), dr.MVCSource, dr.MVCConfidence)
	}
	if s.tvar != nil {
		s.plan.Torch = strp(s.tver)
		s.plan.TorchCUDAVariant = strp(s.tvar.Name)
		abi := s.tvar.CXX11ABI
		s.plan.TorchCXX11ABI = &abi
		s.fact(fmt.Sprintf("torch %s wheel variants: %s", s.torch.Minor, strings.Join(variantNames(s.torch), ", ")), s.torch.Source, s.torch.Confidence)
		if s.tvar.Archs != "" {
			s.fact(fmt.Sprintf("torch %s+%s compiled archs: %s", s.torch.Minor, s.tvar.Name, s.tvar.Archs), s.torch.ArchsSource, s.tvar.ArchsConfidence)
		} else if len(s.gpus) > 0 {
			s.warn("kiln has no compiled-arch data for torch %s+%s: it cannot check that the wheels have kernels for %s", s.torch.Minor, s.tvar.Name, strings.TrimPrefix(s.gpuSuffix(), " and "))
		}
		if s.tvar.Source != "" {
			s.fact(fmt.Sprintf("torch %s+%s wheels", s.torch.Minor, s.tvar.Name), s.tvar.Source, s.tvar.Confidence)
		}
		s.fact(fmt.Sprintf("torch %s+%s C++11 ABI = %v", s.torch.Minor, s.tvar.Name, abi), s.torch.ABISource, s.torch.ABIConfidence)
		if s.torch.PatchesConfidence != cuda.ConfA {
			s.fact(fmt.Sprintf("torch %s patch releases: %s", s.torch.Minor, strings.Join(s.torch.Patches, ", ")), s.torch.PatchesSource, s.torch.PatchesConfidence)
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (s *resolver) archStep() error {
	var ccs []string
	for i, g := range s.gpus {
		ok, why, row := cuda.ArchSupported(s.plan.CUDA, g.ComputeCapability)
		if !ok {
			var alts []string
			if row != nil && row.FirstCUDA != "" && cuda.MustVersion(s.plan.CUDA).Compare(cuda.MustVersion(row.FirstCUDA)) < 0 {
				alts = append(alts, fmt.Sprintf("cuda: %q or newer", row.FirstCUDA))
			}
			if row != nil && row.LastCUDA != "" {
				alts = append(alts, fmt.Sprintf("cuda: %q or older", row.LastCUDA))
			}
			return refuse(fmt.Sprintf("gpus[%d]", i), alts, "%s: %s", g.Name, why)
		}
		if row != nil {
			s.fact(fmt.Sprintf("%s toolkit support: first %s last %s", row.Arch, orNone(row.FirstCUDA), orNone(row.LastCUDA)), row.Source, row.Confidence)
		}
		if s.tvar != nil {
			if _, ptx := cuda.Covers(s.tvar.Archs, g.ComputeCapability); ptx {
				s.warn("torch %s+%s has no %s cubin; it runs via PTX JIT, which needs driver >= %s (not minor-version compatibility) and a slow first start", s.tver, s.tvar.Name, g.Name, s.plan.MinDriver.Toolkit)
			}
		}
		ccs = append(ccs, g.ComputeCapability)
	}
	s.plan.CUDAArchs = cuda.ArchList(ccs)
	if s.plan.CUDAArchs == nil {
		s.plan.CUDAArchs = []string{}
	}
	return nil
}
