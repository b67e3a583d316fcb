package recipes

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/recipes/wheelindex"
	"github.com/kiln-build/kiln/recipes/wheelkey"
)

// Plan is a resolved recipe: exact versions and everything the builder needs.
// Its JSON keys are stable.
type Plan struct {
	Name        string  `json:"name"`
	CUDA        string  `json:"cuda"`
	CuDNN       *string `json:"cudnn"`
	CuDNNSource string  `json:"cudnn_source"` // image, torch-wheel, none
	OS          string  `json:"os"`
	Python      string  `json:"python"`
	// PythonSource is where the image's Python comes from: PythonOS (the
	// base OS's python3, through apt) or PythonStandalone (PythonDist).
	// Either way python, python3 and pip run it in both stages.
	PythonSource     string      `json:"python_source"`
	PythonDist       *PythonDist `json:"python_dist,omitempty"`
	Torch            *string     `json:"torch"`
	TorchCUDAVariant *string     `json:"torch_cuda_variant"`
	Torchvision      *string     `json:"torchvision"`
	Torchaudio       *string     `json:"torchaudio"`
	TorchIndexURL    string      `json:"torch_index_url,omitempty"`
	TorchCXX11ABI    *bool       `json:"torch_cxx11_abi"`
	FlashAttn        *string     `json:"flash_attn"`
	FlashAttnWheel   *string     `json:"flash_attn_wheel"`
	FlashAttnURL     *string     `json:"flash_attn_wheel_url"`
	FlashAttnBuild   *FABuild    `json:"flash_attn_build"`
	BitsAndBytes     *string     `json:"bitsandbytes"`
	BitsAndBytesLib  *string     `json:"bitsandbytes_cuda_lib"`
	BaseImages       BaseImages  `json:"base_images"`
	// RuntimeFlavor is the runtime base's nvidia/cuda flavour: "base" when
	// the torch wheels bring the CUDA libraries (never ship CUDA twice),
	// else "runtime".
	RuntimeFlavor string    `json:"runtime_flavor"`
	CUDAArchs     []string  `json:"cuda_archs"`
	GPUs          []PlanGPU `json:"gpus"`
	// GPUCode is the fat-binary pruning kiln build applies; nil keeps every
	// library's GPU code.
	GPUCode        *PlanGPUCode  `json:"gpu_code"`
	MinDriver      PlanMinDriver `json:"min_driver"`
	Platforms      []string      `json:"platforms"`
	RegistryMirror string        `json:"registry_mirror,omitempty"`
	WheelIndexes   []string      `json:"wheel_indexes"`
	Apt            []string      `json:"apt"`
	Pip            []PipPackage  `json:"pip"`
	App            *AppSpec      `json:"app"`
	Weights        []Weight      `json:"weights"`
	Test           []string      `json:"test"`
	Warnings       []string      `json:"warnings"`
	Sources        []FactSource  `json:"sources"`
	DataVersion    string        `json:"data_version"`
	// Data says which compatibility data the plan used and how old it is;
	// set only when the caller asks (WithDataAge), so that a lock does not
	// change with the calendar.
	Data *PlanData `json:"data,omitempty"`
}

// PlanData is the compatibility data a plan was resolved with.
type PlanData struct {
	Version string `json:"version"`
	// Origin is "embedded" or the refreshed data file's path.
	Origin string `json:"origin"`
	// Date is when the torch, torchvision/torchaudio and nvidia/cuda facts
	// were last checked against their sources (YYYY-MM-DD).
	Date       string `json:"date"`
	AgeDays    int    `json:"age_days"`
	MaxAgeDays int    `json:"max_age_days"`
	// Stale is AgeDays > MaxAgeDays: a warning says so too.
	Stale bool `json:"stale"`
}

// BaseImages are the nvidia/cuda images the build starts from.
type BaseImages struct {
	Devel   string `json:"devel"`
	Runtime string `json:"runtime"`
}

// PlanMinDriver is the minimum host driver for the image.
type PlanMinDriver struct {
	Toolkit            string `json:"toolkit"`
	MinorVersionCompat string `json:"minor_version_compat"`
}

// PlanGPU is a target GPU.
type PlanGPU struct {
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability"`
}

// PlanGPUCode is what kiln build keeps of the installed libraries' GPU
// code: for each architecture in Archs (sm_90) its native cubin, and with
// KeepPTX each fat binary's newest PTX; NVIDIA's libraries only with
// NVIDIALibs.
type PlanGPUCode struct {
	Archs      []string `json:"archs"`
	KeepPTX    bool     `json:"keep_ptx"`
	NVIDIALibs bool     `json:"nvidia_libs"`
}

// FABuild holds the settings for building FlashAttention from source.
type FABuild struct {
	Reason      string            `json:"reason"`
	CUDAArchs   string            `json:"flash_attn_cuda_archs"`
	MaxJobs     int               `json:"max_jobs"`
	NvccThreads int               `json:"nvcc_threads"`
	MemoryGB    int               `json:"sized_for_memory_gb"`
	CPUs        int               `json:"sized_for_cpus"`
	Env         map[string]string `json:"env"`
	PipFlags    []string          `json:"pip_flags"`
}

// PipPackage is one pip requirement, in install order.
type PipPackage struct {
	Name        string `json:"name"`
	Requirement string `json:"requirement"`
	IndexURL    string `json:"index_url,omitempty"`
	URL         string `json:"url,omitempty"`
	Wheel       string `json:"wheel,omitempty"`
	NoBuildIso  bool   `json:"no_build_isolation,omitempty"`
	// Build is "source" for a requirement kiln compiles from its source
	// archive (the recipe's pip_from_source; FlashAttention's build:
	// source is FlashAttnBuild); empty for a wheel from the index.
	Build string `json:"build,omitempty"`
}

// FromSource says whether kiln compiles pp from its source archive.
func (pp PipPackage) FromSource() bool { return pp.Build == BuildSource }

// Version is the version pp pins with ==, if it does.
func (pp PipPackage) Version() (string, bool) {
	_, v, ok := pinned(pp.Requirement)
	return v, ok
}

// BuildSource is PipPackage.Build for a requirement compiled from source.
const BuildSource = "source"

// Compiled are the pip requirements a build compiles into wheels, in
// install order: FlashAttention with build: source, and the recipe's
// pip_from_source requirements.
func (p *Plan) Compiled() []PipPackage {
	var out []PipPackage
	for _, pp := range p.Pip {
		if pp.FromSource() || pp.Name == "flash-attn" && p.FlashAttnBuild != nil {
			out = append(out, pp)
		}
	}
	return out
}

// StackPins are the plan's optional stack versions that are set, as
// (name, value) pairs in a fixed order: cudnn, torch, torch-cuda-variant,
// flash-attn, bitsandbytes, then cuda-archs (comma-separated). The SBOM's
// plan properties and the provenance's parameters are made from them.
func (p *Plan) StackPins() [][2]string {
	var out [][2]string
	for _, kv := range []struct {
		k string
		v *string
	}{{"cudnn", p.CuDNN}, {"torch", p.Torch}, {"torch-cuda-variant", p.TorchCUDAVariant}, {"flash-attn", p.FlashAttn}, {"bitsandbytes", p.BitsAndBytes}} {
		if kv.v != nil && *kv.v != "" {
			out = append(out, [2]string{kv.k, *kv.v})
		}
	}
	if len(p.CUDAArchs) > 0 {
		out = append(out, [2]string{"cuda-archs", strings.Join(p.CUDAArchs, ",")})
	}
	return out
}

// FactSource records where a fact the plan relies on comes from.
type FactSource struct {
	Fact       string `json:"fact"`
	Source     string `json:"source"`
	Confidence string `json:"confidence"`
}

// ResolveError is a refusal: what cannot work, why, and what would.
type ResolveError struct {
	Field        string   `json:"field"`
	Reason       string   `json:"reason"`
	Alternatives []string `json:"alternatives,omitempty"`
}

func (e *ResolveError) Error() string {
	s := e.Reason
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	if len(e.Alternatives) > 0 {
		s += "; try: " + strings.Join(e.Alternatives, "; or ")
	}
	return s
}

func refuse(field string, alts []string, format string, a ...any) *ResolveError {
	return &ResolveError{Field: field, Reason: fmt.Sprintf(format, a...), Alternatives: alts}
}

// ResolveOption adjusts resolution.
type ResolveOption func(*resolveConfig)

type resolveConfig struct {
	mirror   *string
	indexes  []string
	memoryGB int
	cpus     int
	db       *DB
	now      time.Time
	maxAge   int
	// pythonMirror replaces the Python download's URL prefix.
	pythonMirror string
}

// WithData resolves against db (a refreshed data file, LoadDataFile)
// instead of the embedded data.
func WithData(db *DB) ResolveOption { return func(c *resolveConfig) { c.db = db } }

// DefaultMaxDataAgeDays is how old the torch and nvidia/cuda facts may be
// before a plan warns: PyTorch releases every two to three months and
// nvidia/cuda tags change more often.
const DefaultMaxDataAgeDays = 90

// WithDataAge reports the data's age as of now in Plan.Data and warns when
// it is older than maxAgeDays (0: DefaultMaxDataAgeDays).
func WithDataAge(now time.Time, maxAgeDays int) ResolveOption {
	return func(c *resolveConfig) {
		c.now = now
		c.maxAge = maxAgeDays
		if c.maxAge <= 0 {
			c.maxAge = DefaultMaxDataAgeDays
		}
	}
}

// WithMirror overrides the recipe's registry_mirror ("" removes it).
func WithMirror(m string) ResolveOption { return func(c *resolveConfig) { c.mirror = &m } }

// WithWheelIndexes overrides the recipe's wheel_indexes.
func WithWheelIndexes(urls ...string) ResolveOption {
	return func(c *resolveConfig) { c.indexes = slices.Clone(urls) }
}

// WithBuildResources sizes FlashAttention source builds (MAX_JOBS) for a
// builder with memoryGB of RAM and cpus cores, unless the recipe says.
func WithBuildResources(memoryGB, cpus int) ResolveOption {
	return func(c *resolveConfig) { c.memoryGB, c.cpus = memoryGB, cpus }
}

// Default sizing of source builds when neither the recipe nor the caller says.
const (
	DefaultBuildMemoryGB = 32
	DefaultBuildCPUs     = 8
	DefaultOS            = "ubuntu22.04"
	DefaultPlatform      = "linux/amd64"
	PyPIIndexURL         = "https://pypi.org/simple"
)

type resolver struct {
	r     *Recipe
	cfg   resolveConfig
	db    *DB
	plan  *Plan
	gpus  []cuda.GPUInfo
	torch *TorchRelease
	tver  string
	tvar  *TorchVariant
}

func (s *resolver) warn(format string, a ...any) {
	s.plan.Warnings = append(s.plan.Warnings, fmt.Sprintf(format, a...))
}

func (s *resolver) fact(fact, source, conf string) {
	for _, f := range s.plan.Sources {
		if f.Fact == fact {
			return
		}
	}
	s.plan.Sources = append(s.plan.Sources, FactSource{fact, source, conf})
}

func strp(s string) *string { return &s }

// Resolve turns a recipe into a plan, filling unpinned fields with the
// newest compatible choice, or refuses with a *ResolveError that says why
// and what would work. It does no network I/O.
func Resolve(ctx context.Context, r *Recipe, opts ...ResolveOption) (*Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var cfg resolveConfig
	for _, o := range opts {
		o(&cfg)
	}
	db := cfg.db
	if db == nil {
		var err error
		if db, err = Data(); err != nil {
			return nil, err
		}
	}
	s := &resolver{r: r, db: db, cfg: cfg, plan: &Plan{Name: r.Name, Warnings: []string{}, Sources: []FactSource{}, DataVersion: db.Version()}}
	steps := []func() error{s.dataStep, s.gpusStep, s.torchAndCUDA, s.archStep, s.pythonStep, s.cudnnStep, s.imagesStep, s.companionStep, s.faStep, s.bnbStep, s.finish}
	for _, st := range steps {
		if err := st(); err != nil {
			return nil, err
		}
	}
	return s.plan, nil
}

// dataStep records which data the plan uses and, when asked, its age.
func (s *resolver) dataStep() error {
	if s.db.Origin != OriginEmbedded {
		s.fact(fmt.Sprintf("torch, torchvision/torchaudio and nvidia/cuda facts from the refreshed data file %s (checked %s)", s.db.Origin, s.db.Date()), "kiln compat refresh (wheel indexes, PyTorch release matrix, registry tags)", cuda.ConfA)
	}
	if s.cfg.now.IsZero() {
		return nil
	}
	d := &PlanData{Version: s.db.Version(), Origin: s.db.Origin, Date: s.db.Date(), MaxAgeDays: s.cfg.maxAge}
	if t, err := time.Parse(time.DateOnly, d.Date); err == nil {
		d.AgeDays = max(int(s.cfg.now.Sub(t).Hours()/24), 0)
	}
	d.Stale = d.AgeDays > d.MaxAgeDays
	s.plan.Data = d
	if d.Stale {
		s.warn("kiln's torch and nvidia/cuda data is %d days old (checked %s; the threshold is %d days): releases and tags since then are unknown to it; run kiln compat refresh -o compat.json and resolve with --compat-data compat.json (or %s=compat.json)", d.AgeDays, d.Date, d.MaxAgeDays, DataEnv)
	}
	return nil
}

// newerThanData refuses a torch version newer than the newest kiln's data
// knows: the release may well exist, so the first way out is refreshing
// the data, then the newest version the data has.
func (s *resolver) newerThanData(want, newest string) error {
	return refuse("torch.version", []string{
		fmt.Sprintf("refresh kiln's data: kiln compat refresh -o compat.json, then resolve with --compat-data compat.json (or %s=compat.json)", DataEnv),
		"torch " + newest,
	}, "torch %s is newer than kiln's data (%s, checked %s; newest known: %s)", want, s.db.Version(), s.db.Date(), newest)
}

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

func pyMinor(p string) int {
	v := cuda.MustVersion(p)
	if len(v) < 2 {
		return 0
	}
	return v[1]
}

func (s *resolver) pythonStep() error {
	r := s.r
	lo, hi := "3.8", "3.14"
	if s.torch != nil {
		lo, hi = s.torch.PythonMin, s.torch.PythonMax
	}
	if r.Python != "" {
		if s.torch != nil {
			p := pyMinor(r.Python)
			switch {
			case p >= pyMinor(lo) && p <= pyMinor(hi):
			case s.torch.PythonExperimental != "" && r.Python == s.torch.PythonExperimental:
				s.warn("Python %s is experimental for torch %s", r.Python, s.torch.Minor)
			default:
				return refuse("python", []string{fmt.Sprintf("python: %q", hi)}, "torch %s supports Python %s-%s, not %s", s.torch.Minor, lo, hi, r.Python)
			}
			s.fact(fmt.Sprintf("torch %s supports Python %s-%s", s.torch.Minor, lo, hi), s.torch.Source, s.torch.Confidence)
		}
		s.plan.Python = r.Python
		return nil
	}
	if s.torch == nil {
		if of := s.osFlavor(s.osName()); of != nil && of.Python != "" {
			s.plan.Python = of.Python
			return nil
		}
	}
	// Newest Python that torch (and torchvision's wheels and a prebuilt
	// FlashAttention wheel, when asked for) supports.
	p := hi
	if s.torch != nil && s.torch.TorchvisionPython != "" && r.Torch.Torchvision == "true" {
		tv := s.torch.TorchvisionPython
		if _, tvHi, _ := strings.Cut(tv, "-"); pyMinor(tvHi) < pyMinor(p) {
			s.warn("Python %s chosen instead of %s: torchvision %s ships wheels for Python %s", tvHi, p, s.torch.TorchvisionMinor, tv)
			p = tvHi
		}
	}
	if r.FlashAttn != nil && pyMinor(p) > 13 {
		p = "3.13"
		s.warn("Python %s chosen instead of %s: no FlashAttention release kiln knows ships wheels for Python > 3.13", p, hi)
	}
	// A Python kiln can put in the image: the OS's python3 or a pinned
	// relocatable build.
	if q := s.providable(p, lo); q != "" && q != p {
		s.warn("Python %s chosen instead of %s: kiln has no pinned build of Python %s and %s ships %s", q, p, p, s.osName(), osPython(s.osFlavor(s.osName())))
		p = q
	}
	s.plan.Python = p
	if s.torch != nil {
		s.fact(fmt.Sprintf("torch %s supports Python %s-%s", s.torch.Minor, lo, hi), s.torch.Source, s.torch.Confidence)
	}
	return nil
}

func (s *resolver) cudnnStep() error {
	r := s.r
	tag := s.imageTag(s.plan.CUDA)
	mode := r.CuDNN
	if mode == "" {
		mode = "auto"
	}
	switch mode {
	case "auto":
		if s.tvar != nil {
			s.plan.CuDNNSource = "torch-wheel"
			if s.tvar.CuDNN != "" {
				s.plan.CuDNN = strp(s.tvar.CuDNN)
				s.fact(fmt.Sprintf("torch %s+%s bundles cuDNN %s (pip nvidia-cudnn-*)", s.torch.Minor, s.tvar.Name, s.tvar.CuDNN), s.torch.Source, s.torch.Confidence)
			} else {
				s.warn("kiln does not know which cuDNN torch %s+%s bundles (pip nvidia-cudnn-*)", s.torch.Minor, s.tvar.Name)
			}
		} else if tag != nil && tag.CuDNNToken != "" {
			s.plan.CuDNN, s.plan.CuDNNSource = strp(s.tagCuDNN(tag)), "image"
		} else {
			s.plan.CuDNNSource = "none"
			s.warn("no cuDNN: kiln has no cuDNN data for nvidia/cuda:%s", s.plan.CUDA)
		}
	case "none":
		if s.tvar != nil {
			s.plan.CuDNNSource = "torch-wheel"
			if s.tvar.CuDNN != "" {
				s.plan.CuDNN = strp(s.tvar.CuDNN)
			}
		} else {
			s.plan.CuDNNSource = "none"
		}
	case "8", "9":
		if tag == nil || tag.CuDNNToken == "" {
			return refuse("cudnn", []string{"cudnn: auto"}, "kiln has no cuDNN data for nvidia/cuda:%s", s.plan.CUDA)
		}
		if tagCuDNNMajor(tag) != mode {
			var alts []string
			var last string
			for _, t := range s.db.Images.Tags {
				if t.CuDNNToken != "" && tagCuDNNMajor(&t) == mode {
					last = t.CUDA
				}
			}
			if last != "" {
				alts = append(alts, fmt.Sprintf("cuda: %q (the newest image with cuDNN %s)", last, mode))
			}
			alts = append(alts, fmt.Sprintf("cudnn: %q", tagCuDNNMajor(tag)))
			return refuse("cudnn", alts, "nvidia/cuda:%s images ship cuDNN %s, not cuDNN %s", s.plan.CUDA, s.tagCuDNN(tag), mode)
		}
		s.plan.CuDNN, s.plan.CuDNNSource = strp(s.tagCuDNN(tag)), "image"
		if s.tvar != nil && tag.CuDNN != "" && s.tvar.CuDNN != tag.CuDNN {
			s.warn("the image's cuDNN %s differs from the cuDNN %s that torch %s+%s bundles; torch uses its own", tag.CuDNN, s.tvar.CuDNN, s.tver, s.tvar.Name)
		}
	}
	if s.plan.CuDNNSource == "image" && tag != nil {
		s.fact(fmt.Sprintf("nvidia/cuda:%s ships cuDNN %s (%s-)", tag.CUDA, s.tagCuDNN(tag), tag.CuDNNToken), tag.Source, tag.Confidence)
	}
	return nil
}

// tagCuDNNMajor is the cuDNN major of a tag's cuDNN variant: from the
// version when known, else from the tag's infix (cudnn8 → 8; cudnn9 and,
// from 12.4.1 on, plain cudnn → 9).
func tagCuDNNMajor(t *ImageTag) string {
	if t.CuDNN != "" {
		return strings.SplitN(t.CuDNN, ".", 2)[0]
	}
	switch t.CuDNNToken {
	case "cudnn8":
		return "8"
	case "cudnn9", "cudnn":
		return "9"
	}
	return ""
}

// tagCuDNN is the cuDNN a tag ships: the exact version when kiln has read
// it, else only its major, with a warning.
func (s *resolver) tagCuDNN(t *ImageTag) string {
	if t.CuDNN != "" {
		return t.CuDNN
	}
	m := tagCuDNNMajor(t)
	msg := fmt.Sprintf("kiln does not know the exact cuDNN of nvidia/cuda:%s-%s-* images (cuDNN %s by the tag); kiln analyze reads it from the image", t.CUDA, t.CuDNNToken, m)
	if !slices.Contains(s.plan.Warnings, msg) {
		s.warn("%s", msg)
	}
	return m
}

func (s *resolver) osName() string {
	if s.r.OS != "" {
		return s.r.OS
	}
	if cuda.MustVersion(s.plan.CUDA).Major() >= 13 {
		return "ubuntu24.04"
	}
	return DefaultOS
}

func (s *resolver) imagesStep() error {
	r := s.r
	osName := s.osName()
	s.plan.OS = osName
	of := s.osFlavor(osName)
	if of == nil {
		return refuse("os", nil, "unknown OS flavour %q", osName)
	}
	if of.FirstCUDA != "" && cuda.CompareVersions(s.plan.CUDA, of.FirstCUDA) < 0 {
		return refuse("os", []string{"os: ubuntu22.04", fmt.Sprintf("cuda: %q or newer", of.FirstCUDA)}, "nvidia/cuda publishes %s images from CUDA %s on, not for %s", osName, of.FirstCUDA, s.plan.CUDA)
	}
	if of.LastCUDA != "" && cuda.CompareVersions(cuda.MajorMinor(s.plan.CUDA), of.LastCUDA) > 0 {
		return refuse("os", []string{"os: ubuntu24.04", fmt.Sprintf("cuda: %q or older", of.LastCUDA)}, "nvidia/cuda has no %s images for CUDA %s (last: %s)", osName, s.plan.CUDA, of.LastCUDA)
	}
	if of.Unofficial {
		s.warn("%s is not an nvidia/cuda flavour kiln has data for; the base images must exist in your registry or mirror", osName)
	}
	s.fact(fmt.Sprintf("nvidia/cuda OS flavour %s", osName), of.Source, of.Confidence)
	tok := ""
	if s.plan.CuDNNSource == "image" {
		if tag := s.imageTag(s.plan.CUDA); tag != nil {
			tok = tag.CuDNNToken + "-"
		}
	}
	mirror := r.RegistryMirror
	if s.cfg.mirror != nil {
		mirror = *s.cfg.mirror
	}
	s.plan.RegistryMirror = mirror
	runtime := fmt.Sprintf(cudaRepo+":%s-%sruntime-%s", s.plan.CUDA, tok, osName)
	s.plan.RuntimeFlavor = "runtime"
	switch r.RuntimeBase {
	case "base":
		s.plan.RuntimeFlavor = "base"
	case "", "auto":
		// PyTorch's CUDA wheels depend on nvidia-*-cuXX wheels that carry
		// cuBLAS, cuDNN, NCCL...; on -runtime those libraries would ship
		// twice. cuDNN asked of the image (cudnn: 8|9) keeps -runtime.
		if s.tvar != nil && s.plan.CuDNNSource != "image" {
			s.plan.RuntimeFlavor = "base"
			s.fact(fmt.Sprintf("torch %s+%s brings its CUDA libraries as nvidia-* wheels, so the runtime stage uses the -base image (CUDA shipped once)", s.torch.Minor, s.tvar.Name), torchLibsSource, "A")
		}
	}
	if s.plan.RuntimeFlavor == "base" {
		// There is no cudnn variant of -base.
		runtime = fmt.Sprintf(cudaRepo+":%s-base-%s", s.plan.CUDA, osName)
	}
	s.plan.BaseImages = BaseImages{
		Devel:   MirrorRef(mirror, fmt.Sprintf(cudaRepo+":%s-%sdevel-%s", s.plan.CUDA, tok, osName)),
		Runtime: MirrorRef(mirror, runtime),
	}
	if req, ir, ok := cuda.ImageRequireCUDA(s.plan.CUDA); ok {
		if !slices.Contains(req.Brands(), "geforce") && !slices.Contains(req.Brands(), "geforcertx") {
			s.warn("GeForce/TITAN hosts need driver >= %s (CUDA %s natively): the image's NVIDIA_REQUIRE_CUDA has no GeForce brand clauses, so minor-version compatibility is refused at container start (NVIDIA_DISABLE_REQUIRE=1 overrides)", s.plan.MinDriver.Toolkit, cuda.MajorMinor(s.plan.CUDA))
		}
		s.fact(fmt.Sprintf("NVIDIA_REQUIRE_CUDA of nvidia/cuda:%s", ir.Image), ir.Source, ir.Confidence)
	}
	s.plan.Platforms = slices.Clone(r.Platforms)
	if len(s.plan.Platforms) == 0 {
		s.plan.Platforms = []string{DefaultPlatform}
	}
	return s.pythonProvider()
}

// torchLibsSource is where the "torch brings its own CUDA libraries" fact
// comes from (compat-data.md §4, [A]).
const torchLibsSource = "pytorch/pytorch .ci/manywheel/build_cuda.sh \"Using nvidia libs from pypi\"; pip freeze of torch+cuXXX installs (nvidia-cublas-cu12, nvidia-cudnn-cu12, ...)"

// cudaRepo is NVIDIA's CUDA repository on Docker Hub, named in full as
// every plan and lock records a base image (registry.NormalizeName's rule):
// docker.io/nvidia/cuda, never the short nvidia/cuda a reader has to know
// means Docker Hub.
const cudaRepo = "docker.io/nvidia/cuda"

// MirrorRef rewrites a Docker Hub reference ("nvidia/cuda:TAG") to pull
// through mirror ("MIRROR/nvidia/cuda:TAG"); an empty mirror leaves it.
func MirrorRef(mirror, ref string) string {
	if mirror == "" {
		return ref
	}
	ref = strings.TrimPrefix(ref, "docker.io/")
	ref = strings.TrimPrefix(ref, "index.docker.io/")
	return strings.TrimSuffix(mirror, "/") + "/" + ref
}

func (s *resolver) indexes() []string {
	if s.cfg.indexes != nil {
		return s.cfg.indexes
	}
	return s.r.WheelIndexes
}

func (s *resolver) finish() error {
	r, p := s.r, s.plan
	p.WheelIndexes = slices.Clone(s.indexes())
	if p.WheelIndexes == nil {
		p.WheelIndexes = []string{}
	}
	p.Apt = slices.Clone(r.Apt)
	if p.Apt == nil {
		p.Apt = []string{}
	}
	p.App = r.App
	p.Weights = slices.Clone(r.Weights)
	if p.Weights == nil {
		p.Weights = []Weight{}
	}
	p.Test = slices.Clone(r.Test)
	if p.Test == nil {
		p.Test = []string{}
	}
	extraIdx := ""
	if len(p.WheelIndexes) > 0 {
		extraIdx = p.WheelIndexes[0]
	}
	var pip []PipPackage
	if s.tvar != nil {
		idx := wheelindex.JoinURL(s.db.Torch.IndexURL, s.tvar.Name)
		if r.Torch.IndexURL != "" {
			idx = r.Torch.IndexURL
		} else if extraIdx != "" {
			idx = extraIdx
		}
		p.TorchIndexURL = idx
		pip = append(pip, PipPackage{Name: "torch", Requirement: "torch==" + s.tver + "+" + s.tvar.Name, IndexURL: idx})
		if p.Torchvision != nil {
			pip = append(pip, PipPackage{Name: "torchvision", Requirement: "torchvision==" + *p.Torchvision + "+" + s.tvar.Name, IndexURL: idx})
		}
		if p.Torchaudio != nil {
			pip = append(pip, PipPackage{Name: "torchaudio", Requirement: "torchaudio==" + *p.Torchaudio + "+" + s.tvar.Name, IndexURL: idx})
		}
	}
	if p.FlashAttn != nil {
		pp := PipPackage{Name: "flash-attn", Requirement: "flash-attn==" + *p.FlashAttn, NoBuildIso: true, IndexURL: extraIdx}
		if p.FlashAttnWheel != nil {
			pp.Wheel = *p.FlashAttnWheel
			if extraIdx == "" {
				pp.URL = *p.FlashAttnURL
			}
		}
		pip = append(pip, pp)
	}
	if p.BitsAndBytes != nil {
		idx := PyPIIndexURL
		if extraIdx != "" {
			idx = extraIdx
		}
		pip = append(pip, PipPackage{Name: "bitsandbytes", Requirement: "bitsandbytes==" + *p.BitsAndBytes, IndexURL: idx})
	}
	for _, req := range r.Pip {
		pp := PipPackage{Name: reqName(req), Requirement: req, IndexURL: extraIdx}
		if slices.ContainsFunc(r.PipFromSource, func(n string) bool { return wheelkey.NormalizeName(n) == wheelkey.NormalizeName(pp.Name) }) {
			pp.Build = BuildSource
		}
		pip = append(pip, pp)
	}
	if pip == nil {
		pip = []PipPackage{}
	}
	p.Pip = pip
	s.commandsStep()
	return nil
}

func reqName(req string) string {
	i := strings.IndexAny(req, "=<>!~[; @")
	if i < 0 {
		return strings.TrimSpace(req)
	}
	return strings.TrimSpace(req[:i])
}

// maxJobs sizes ninja parallelism like FlashAttention's setup.py: about
// 9 GB of RAM per job, at most half the CPUs, at least one.
func maxJobs(memGB, cpus, perJob int) int {
	if perJob <= 0 {
		perJob = 9
	}
	j := min(cpus/2, memGB/perJob)
	return max(j, 1)
}

func itoa(n int) string { return strconv.Itoa(n) }
