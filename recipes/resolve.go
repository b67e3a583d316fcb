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
