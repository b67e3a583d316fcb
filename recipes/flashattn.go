package recipes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kiln-build/kiln/cuda"
)

func (s *resolver) faRelease(v string) *FARelease {
	for i := range s.db.FA.Releases {
		if s.db.FA.Releases[i].Version == v {
			return &s.db.FA.Releases[i]
		}
	}
	return nil
}

func faVersions(db *DB) []string {
	var out []string
	for _, r := range db.FA.Releases {
		out = append(out, r.Version)
	}
	return out
}

func pyInRange(py, rng string) bool {
	lo, hi, ok := strings.Cut(rng, "-")
	if !ok {
		return py == rng
	}
	p := pyMinor(py)
	return p >= pyMinor(lo) && p <= pyMinor(hi)
}

// faCuToken is the cu token in a wheel name for a torch CUDA version.
func faCuToken(rel *FARelease, torchCUDA string) string {
	major := cuda.MustVersion(torchCUDA).Major()
	switch rel.CuToken {
	case "bucket-122", "bucket-123":
		if major == 11 {
			return "118"
		}
		return strings.TrimPrefix(rel.CuToken, "bucket-")
	}
	return itoa(major)
}

// faWheel returns the prebuilt wheel filename for the plan, or why there is none.
func (s *resolver) faWheel(rel *FARelease) (string, string, []string) {
	tMinor := s.torch.Minor
	if !slices.ContainsFunc(rel.Torch, func(t string) bool { return cuda.MajorMinor(t) == tMinor }) {
		return "", fmt.Sprintf("FlashAttention %s publishes wheels for torch %s, not %s", rel.Version, strings.Join(rel.Torch, ", "), tMinor), nil
	}
	if !pyInRange(s.plan.Python, rel.Python) {
		return "", fmt.Sprintf("FlashAttention %s publishes wheels for Python %s, not %s", rel.Version, rel.Python, s.plan.Python), nil
	}
	tMajor := cuda.MustVersion(s.tvar.CUDA).Major()
	var built string
	for _, c := range rel.CUDABuilt {
		if cuda.MustVersion(c).Major() == tMajor {
			built = c
		}
	}
	if built == "" {
		return "", fmt.Sprintf("FlashAttention %s publishes wheels built with CUDA %s, none for CUDA %d", rel.Version, strings.Join(rel.CUDABuilt, ", "), tMajor), nil
	}
	if !slices.Contains(rel.ABI, s.tvar.CXX11ABI) {
		return "", fmt.Sprintf("FlashAttention %s has no cxx11abi%s wheels", rel.Version, strings.ToUpper(fmt.Sprint(s.tvar.CXX11ABI))), nil
	}
	for _, p := range s.plan.Platforms {
		if !slices.Contains(rel.Platforms, wheelArch(p)) {
			return "", fmt.Sprintf("FlashAttention %s publishes no %s wheels", rel.Version, p), nil
		}
	}
	// Which GPUs the wheel's cubins cover: sm_80 always, sm_90 with nvcc >= 11.8,
	// sm_100/sm_120 with nvcc >= 12.8 from 2.7.4.post1 (setup.py).
	archs := []string{"80"}
	sb := s.db.FA.SourceBuild
	if cuda.CompareVersions(built, sb.SM90MinNvcc) >= 0 {
		archs = append(archs, "90")
	}
	if cuda.CompareVersions(built, sb.SM100MinNvcc) >= 0 && pepCompare(rel.Version, sb.SM100Since) >= 0 {
		archs = append(archs, "100", "120")
	}
	list := strings.Join(archs, ";")
	for _, g := range s.gpus {
		if ok, _ := cuda.Covers(list, g.ComputeCapability); !ok {
			return "", fmt.Sprintf("FlashAttention %s wheels (built with CUDA %s) have no kernels for %s (sm_%s)", rel.Version, built, g.Name, strings.ReplaceAll(g.ComputeCapability, ".", "")), nil
		}
	}
	py := strings.ReplaceAll(s.plan.Python, ".", "")
	name := fmt.Sprintf("flash_attn-%s+cu%storch%scxx11abi%s-cp%s-cp%s-linux_x86_64.whl", rel.Version, faCuToken(rel, s.tvar.CUDA), tMinor, strings.ToUpper(fmt.Sprint(s.tvar.CXX11ABI)), py, py)
	return name, "", []string{built}
}

func (s *resolver) faStep() error {
	fa := s.r.FlashAttn
	if fa == nil {
		return nil
	}
	if s.tvar == nil {
		return refuse("flash_attn", []string{"torch: {version: \"2.5.1\"}"}, "FlashAttention needs torch; add a torch section")
	}
	// GPUs: FlashAttention 2 needs sm_80+.
	minCC := s.db.FA.MinCC
	for i, g := range s.gpus {
		if cuda.CompareVersions(g.ComputeCapability, minCC) < 0 {
			return refuse(fmt.Sprintf("gpus[%d]", i), []string{"remove flash_attn and use torch.nn.functional.scaled_dot_product_attention", "target an sm_80+ GPU such as a10, l4, a100 or h100"},
				"FlashAttention 2 needs sm_80 or newer (Ampere, Ada, Hopper); %s is sm_%s", g.Name, strings.ReplaceAll(g.ComputeCapability, ".", ""))
		}
	}
	s.fact("FlashAttention 2 needs compute capability >= "+minCC, "flash-attention README", cuda.ConfA)
	if len(s.gpus) == 0 {
		s.warn("FlashAttention 2 runs only on sm_80+ GPUs (A100, A10, L4, H100, ...); set gpus to check")
	}
	var cands []*FARelease
	if fa.Version != "" {
		rel := s.faRelease(fa.Version)
		if rel == nil {
			if fa.Build == "wheel" {
				return refuse("flash_attn.version", []string{"flash_attn.version: " + strings.Join(faVersions(s.db), ", ")}, "kiln has no wheel data for FlashAttention %s", fa.Version)
			}
			s.warn("FlashAttention %s is not in kiln's data; it will be built from source", fa.Version)
			return s.faSource(fa.Version, "not in kiln's wheel data", nil)
		}
		cands = []*FARelease{rel}
	} else {
		for i := len(s.db.FA.Releases) - 1; i >= 0; i-- {
			cands = append(cands, &s.db.FA.Releases[i])
		}
	}
	var firstWhy string
	var buildable *FARelease
	for _, rel := range cands {
		if why := s.faRequirements(rel); why != "" {
			if firstWhy == "" {
				firstWhy = why
			}
			continue
		}
		if buildable == nil {
			buildable = rel
		}
		if fa.Build == "source" {
			break
		}
		name, why, built := s.faWheel(rel)
		if name == "" {
			if firstWhy == "" {
				firstWhy = why
			}
			continue
		}
		v := rel.Version
		s.plan.FlashAttn = &v
		s.plan.FlashAttnWheel = strp(name)
		s.plan.FlashAttnURL = strp(fmt.Sprintf("https://github.com/Dao-AILab/flash-attention/releases/download/v%s/%s", v, name))
		s.fact(fmt.Sprintf("FlashAttention %s prebuilt wheels: torch %s, Python %s, CUDA %s", v, strings.Join(rel.Torch, "/"), rel.Python, strings.Join(rel.CUDABuilt, "/")), rel.Source, rel.Confidence)
		s.fact("FlashAttention wheel file name pattern", "flash-attention setup.py get_wheel_url", cuda.ConfA)
		s.fact("a listed FlashAttention release asset exists", "not checked until kiln lock downloads it", cuda.ConfUnverified)
		_ = built
		return nil
	}
	if buildable == nil {
		return refuse("flash_attn", nil, "%s", firstWhy)
	}
	if fa.Build == "wheel" {
		return refuse("flash_attn.build", s.faWheelAlternatives(cands), "no prebuilt FlashAttention wheel fits: %s", firstWhy)
	}
	reason := firstWhy
	if fa.Build == "source" {
		reason = "flash_attn.build: source"
	}
	return s.faSource(buildable.Version, reason, buildable)
}

// faRequirements checks what a source build of rel needs.
func (s *resolver) faRequirements(rel *FARelease) string {
	if cuda.CompareVersions(cuda.MajorMinor(s.plan.CUDA), rel.MinCUDA) < 0 {
		return fmt.Sprintf("FlashAttention %s needs CUDA >= %s (image is %s)", rel.Version, rel.MinCUDA, s.plan.CUDA)
	}
	if cuda.CompareVersions(s.tver, rel.MinTorch) < 0 {
		return fmt.Sprintf("FlashAttention %s needs torch >= %s", rel.Version, rel.MinTorch)
	}
	if pyMinor(s.plan.Python) < pyMinor(rel.MinPython) {
		return fmt.Sprintf("FlashAttention %s needs Python >= %s", rel.Version, rel.MinPython)
	}
	return ""
}

func (s *resolver) faSource(version, reason string, rel *FARelease) error {
	sb := s.db.FA.SourceBuild
	var archs []string
	add := func(a string) {
		if !slices.Contains(archs, a) {
			archs = append(archs, a)
		}
	}
	for _, g := range s.gpus {
		cc := cuda.MustVersion(g.ComputeCapability)
		switch cc.Major() {
		case 8:
			add("80")
		case 9:
			add("90")
		case 10:
			add("100")
		case 12:
			add("120")
		default:
			return refuse("gpus", nil, "FlashAttention 2's setup.py builds for 80;90;100;120 only; %s (sm_%s) is not one of them", g.Name, strings.ReplaceAll(g.ComputeCapability, ".", ""))
		}
	}
	if len(archs) == 0 {
		archs = []string{"80", "90"}
		if cuda.CompareVersions(s.plan.CUDA, sb.SM100MinNvcc) >= 0 {
			archs = append(archs, "100", "120")
		}
	}
	for _, a := range archs {
		if (a == "100" || a == "120") && cuda.CompareVersions(s.plan.CUDA, sb.SM100MinNvcc) < 0 {
			return refuse("cuda", []string{fmt.Sprintf("cuda: %q", sb.SM100MinNvcc)}, "building FlashAttention for sm_%s needs nvcc >= %s", a, sb.SM100MinNvcc)
		}
	}
	slices.SortFunc(archs, func(a, b string) int { return len(a)*1000 + int(a[0]) - len(b)*1000 - int(b[0]) })
	mem, cpus := DefaultBuildMemoryGB, DefaultBuildCPUs
	if s.cfg.memoryGB > 0 {
		mem = s.cfg.memoryGB
	}
	if s.cfg.cpus > 0 {
		cpus = s.cfg.cpus
	}
	if b := s.r.Build; b != nil {
		if b.MemoryGB > 0 {
			mem = b.MemoryGB
		}
		if b.CPUs > 0 {
			cpus = b.CPUs
		}
	}
	jobs := maxJobs(mem, cpus, sb.MemPerJobGB)
	list := strings.Join(archs, ";")
	s.plan.FlashAttn = strp(version)
	s.plan.FlashAttnBuild = &FABuild{
		Reason: reason, CUDAArchs: list, MaxJobs: jobs, NvccThreads: sb.NvccThreads, MemoryGB: mem, CPUs: cpus,
		Env: map[string]string{
			"FLASH_ATTN_CUDA_ARCHS":       list,
			"MAX_JOBS":                    itoa(jobs),
			"NVCC_THREADS":                itoa(sb.NvccThreads),
			"FLASH_ATTENTION_FORCE_BUILD": "TRUE",
		},
		PipFlags: []string{"--no-build-isolation", "--no-binary", "flash-attn"},
	}
	s.warn("FlashAttention %s will be built from source in the devel image (%s): MAX_JOBS=%d for %d GB RAM / %d CPUs at ~%d GB per job; expect tens of minutes to hours", version, reason, jobs, mem, cpus, sb.MemPerJobGB)
	s.fact("FlashAttention source build: FLASH_ATTN_CUDA_ARCHS, ~9 GB per ninja job", sb.Source, sb.Confidence)
	if rel != nil {
		s.fact(fmt.Sprintf("FlashAttention %s needs CUDA >= %s, torch >= %s", rel.Version, rel.MinCUDA, rel.MinTorch), rel.Source, rel.Confidence)
	}
	return nil
}

// faWheelAlternatives says what would give a prebuilt wheel when none fits
// the plan's Python or platforms: a Python the newest release with wheels
// for this torch covers, amd64 when no release publishes the platform, or
// a source build.
func (s *resolver) faWheelAlternatives(cands []*FARelease) []string {
	var alts []string
	for _, rel := range cands {
		if !slices.ContainsFunc(rel.Torch, func(t string) bool { return cuda.MajorMinor(t) == s.torch.Minor }) {
			continue
		}
		if !pyInRange(s.plan.Python, rel.Python) {
			_, hi, _ := strings.Cut(rel.Python, "-")
			hi = pyClamp(hi, s.torch.PythonMax)
			if pyMinor(hi) >= pyMinor(s.torch.PythonMin) {
				alts = append(alts, fmt.Sprintf("python: %q (FlashAttention %s wheels are for Python %s)", hi, rel.Version, rel.Python))
			}
		}
		break
	}
	for _, p := range s.plan.Platforms {
		if !slices.ContainsFunc(cands, func(r *FARelease) bool { return slices.Contains(r.Platforms, wheelArch(p)) }) {
			alts = append(alts, fmt.Sprintf("platforms: [linux/amd64] (no FlashAttention release kiln knows publishes %s wheels)", p))
			break
		}
	}
	return append(alts, "flash_attn.build: auto (build from source)")
}

// pepCompare orders PEP 440-ish releases such as "2.7.4.post1" by their
// numeric release, then their post number, for FlashAttention releases (a
// Python packaging rule, which is why it is not in cuda's Version).
func pepCompare(a, b string) int {
	ra, pa := splitPost(a)
	rb, pb := splitPost(b)
	if c := cuda.CompareVersions(ra, rb); c != 0 {
		return c
	}
	return pa - pb
}

func splitPost(s string) (string, int) {
	if i := strings.Index(s, ".post"); i >= 0 {
		n, _ := strconv.Atoi(s[i+5:])
		return s[:i], n + 1
	}
	return s, 0
}
