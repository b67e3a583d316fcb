package slim

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/internal/localfile"
)

// WeightsAction says what happens to model weights.
type WeightsAction string

// Weights actions.
const (
	// WeightsKeep leaves weights in the image.
	WeightsKeep WeightsAction = "keep"
	// WeightsDivert hands weights to Options.Divert (kiln weights, a volume);
	// without a diverter they are kept, and the report says so.
	WeightsDivert WeightsAction = "divert"
	// WeightsDrop deletes them from the image; nothing keeps a copy.
	WeightsDrop WeightsAction = "drop"
)

// JITAction says what happens when a package that compiles kernels at run
// time (Triton, FlashInfer JIT, DeepGEMM, torch cpp_extension users) is
// present while the policy drops the compiler or the headers.
type JITAction string

// JIT actions.
const (
	// JITKeep keeps the toolkit binaries and headers the packages need.
	JITKeep JITAction = "keep"
	// JITRefuse fails the rewrite unless Options.Force is set.
	JITRefuse JITAction = "refuse"
)

// PruneMode says whether libraries nothing links are dropped.
type PruneMode string

// Prune modes.
const (
	// PruneOff keeps every shared library (the default: safety first).
	PruneOff PruneMode = "off"
	// PruneUnreferenced drops shared libraries in the dynamic linker's
	// directories that no kept program, Python extension or application
	// object needs, directly or transitively (DT_NEEDED), and that no
	// keep-list names as loaded with dlopen. Only a probe that exercises
	// the application proves the result runs.
	PruneUnreferenced PruneMode = "unreferenced"
)

// Policy decides which files a slim image keeps. The YAML form:
//
//	drop: [dev_tools, headers, static_libs, docs, caches]  # analyze's classes
//	weights: divert            # keep | divert | drop
//	remove: ["usr/share/locale/**"]   # globs, always dropped
//	keep: ["usr/share/doc/*/copyright"] # globs, always kept (wins over drop/remove)
//	dedupe_cuda_libs: true     # one copy of a CUDA library installed twice
//	jit: keep                  # keep | refuse (see JITAction)
//	prune_libs: unreferenced   # off | unreferenced (see PruneMode)
//	keep_libs: ["libfoo.so*"]  # libraries prune keeps (name or path globs)
type Policy struct {
	// Name is "runtime", "weights" or the policy file's path.
	Name           string           `yaml:"-"`
	Drop           []classify.Class `yaml:"drop"`
	Weights        WeightsAction    `yaml:"weights"`
	Remove         []string         `yaml:"remove"`
	Keep           []string         `yaml:"keep"`
	DedupeCUDALibs bool             `yaml:"dedupe_cuda_libs"`
	JIT            JITAction        `yaml:"jit"`
	PruneLibs      PruneMode        `yaml:"prune_libs"`
	KeepLibs       []string         `yaml:"keep_libs"`
}

// Prunes reports whether unreferenced libraries are dropped.
func (p *Policy) Prunes() bool { return p.PruneLibs == PruneUnreferenced }

// BuiltinPolicies lists the names BuiltinPolicy knows.
var BuiltinPolicies = []string{"runtime", "runtime-strict", "weights"}

// BuiltinPolicy returns a built-in policy:
//
//	runtime  drops what only a build needs (toolkit binaries such as nvcc,
//	         ptxas, cicc and Nsight, headers, static libraries, docs) and
//	         caches (pip, apt, conda, __pycache__), dedupes CUDA libraries
//	         and diverts weights; license files stay.
//	runtime-strict  runtime, plus prune_libs: unreferenced (libraries no
//	         kept program, extension module or application object links,
//	         and no dlopen keep-list names, are dropped), the C++ test
//	         programs Debian's torch ships, and the system's message
//	         translations. Use it with a probe that exercises the
//	         application.
//	weights  diverts weights and drops nothing else.
func BuiltinPolicy(name string) (*Policy, error) {
	switch name {
	case "runtime-strict":
		p, _ := BuiltinPolicy("runtime")
		p.Name, p.PruneLibs = "runtime-strict", PruneUnreferenced
		// Debian's torch ships its C++ test programs: in torch/bin
		// (test_api, test_tensorexpr, ...: 40 MB, beside the
		// torch_shm_manager it runs) and in libtorch-test and
		// libtorch-cuda-test (75 MB).
		// And the system's message translations (apt's, grep's, ...:
		// 48 MB in Debian's torch image): a service logs in English.
		p.Remove = []string{"**/torch/bin/test_*", "**/torch/bin/*Test", "**/torch/bin/*_test", "**/torch/bin/tutorial_*", "usr/lib/libtorch*-test/**",
			"usr/share/locale/*/LC_MESSAGES/*.mo"}
		return p, nil
	case "runtime":
		return &Policy{
			Name:           "runtime",
			Drop:           []classify.Class{classify.ClassDevTools, classify.ClassHeaders, classify.ClassStaticLibs, classify.ClassDocs, classify.ClassCaches},
			Weights:        WeightsDivert,
			Keep:           []string{"usr/share/doc/*/copyright", "usr/share/common-licenses/**"},
			DedupeCUDALibs: true,
			JIT:            JITKeep,
			PruneLibs:      PruneOff,
		}, nil
	case "weights":
		return &Policy{Name: "weights", Weights: WeightsDivert, JIT: JITKeep, PruneLibs: PruneOff}, nil
	}
	return nil, fmt.Errorf("unknown built-in policy %q (built-in: %s; or a policy file)", name, strings.Join(BuiltinPolicies, ", "))
}

// LoadPolicy reads a YAML policy file. Errors name the file, line and field.
func LoadPolicy(file string) (*Policy, error) {
	b, err := localfile.ReadFile(file, "policy", localfile.MaxPolicy)
	if err != nil {
		return nil, err
	}
	return ParsePolicy(file, b)
}

// ParsePolicy parses a policy; name is used in errors and as Policy.Name.
func ParsePolicy(name string, b []byte) (*Policy, error) {
	p := &Policy{}
	if err := yaml.UnmarshalWithOptions(b, p, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("%s: %s", name, oneLine(yaml.FormatError(err, false, false)))
	}
	p.Name = name
	if p.Weights == "" {
		p.Weights = WeightsKeep
	}
	if p.JIT == "" {
		p.JIT = JITKeep
	}
	if p.PruneLibs == "" {
		p.PruneLibs = PruneOff
	}
	f, _ := parser.ParseBytes(b, 0)
	at := func(yamlPath string) string {
		if line := lineOf(f, yamlPath); line > 0 {
			return fmt.Sprintf("%s:%d", name, line)
		}
		return name
	}
	known := map[classify.Class]bool{}
	var names []string
	for _, c := range classify.AllClasses {
		known[c] = true
		names = append(names, string(c))
	}
	for i, c := range p.Drop {
		if !known[c] {
			return nil, fmt.Errorf("%s: drop[%d]: unknown class %q (classes: %s)", at(fmt.Sprintf("$.drop[%d]", i)), i, c, strings.Join(names, ", "))
		}
		if c == classify.ClassWeights {
			return nil, fmt.Errorf("%s: drop[%d]: weights are not dropped by class; set weights: drop (or divert)", at(fmt.Sprintf("$.drop[%d]", i)), i)
		}
		if c == classify.ClassCUDALibs {
			return nil, fmt.Errorf("%s: drop[%d]: cuda_libs are needed at run time; use dedupe_cuda_libs to drop duplicate copies", at(fmt.Sprintf("$.drop[%d]", i)), i)
		}
	}
	switch p.Weights {
	case WeightsKeep, WeightsDivert, WeightsDrop:
	default:
		return nil, fmt.Errorf("%s: weights: %q is not one of keep, divert, drop", at("$.weights"), p.Weights)
	}
	switch p.JIT {
	case JITKeep, JITRefuse:
	default:
		return nil, fmt.Errorf("%s: jit: %q is not one of keep, refuse", at("$.jit"), p.JIT)
	}
	switch p.PruneLibs {
	case PruneOff, PruneUnreferenced:
	default:
		return nil, fmt.Errorf("%s: prune_libs: %q is not one of off, unreferenced", at("$.prune_libs"), p.PruneLibs)
	}
	for field, globs := range map[string][]string{"remove": p.Remove, "keep": p.Keep, "keep_libs": p.KeepLibs} {
		for i, g := range globs {
			if err := checkGlob(g); err != nil {
				return nil, fmt.Errorf("%s: %s[%d]: %v", at(fmt.Sprintf("$.%s[%d]", field, i)), field, i, err)
			}
		}
	}
	return p, nil
}

func lineOf(f *ast.File, yamlPath string) int {
	if f == nil {
		return 0
	}
	yp, err := yaml.PathString(yamlPath)
	if err != nil {
		return 0
	}
	n, err := yp.FilterFile(f)
	if err != nil || n == nil || n.GetToken() == nil {
		return 0
	}
	return n.GetToken().Position.Line
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// drops reports whether the policy drops class c.
func (p *Policy) drops(c classify.Class) bool {
	return c != classify.ClassOther && slices.Contains(p.Drop, c)
}

// String describes the policy in one line for history entries and reports.
func (p *Policy) String() string {
	var parts []string
	if len(p.Drop) > 0 {
		var cs []string
		for _, c := range p.Drop {
			cs = append(cs, string(c))
		}
		parts = append(parts, "drop "+strings.Join(cs, ","))
	}
	parts = append(parts, "weights "+string(p.Weights))
	if len(p.Remove) > 0 {
		parts = append(parts, "remove "+strings.Join(p.Remove, ","))
	}
	if p.DedupeCUDALibs {
		parts = append(parts, "dedupe cuda_libs")
	}
	if p.Prunes() {
		s := "prune unreferenced libs"
		if len(p.KeepLibs) > 0 {
			s += " (keep " + strings.Join(p.KeepLibs, ",") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// checkGlob validates a glob: path.Match syntax per component, plus "**"
// for any number of components.
func checkGlob(g string) error {
	g = strings.TrimPrefix(g, "/")
	if g == "" {
		return fmt.Errorf("empty glob")
	}
	for _, part := range strings.Split(g, "/") {
		if part == "**" {
			continue
		}
		if _, err := path.Match(part, ""); err != nil {
			return fmt.Errorf("bad glob %q: %v", g, err)
		}
	}
	return nil
}

// matchGlob matches a root-relative path against a glob ("usr/share/doc/*/copyright",
// "usr/share/locale/**"). A glob also matches everything below a matched
// directory.
func matchGlob(g, p string) bool {
	g = strings.TrimSuffix(strings.TrimPrefix(g, "/"), "/")
	return matchParts(strings.Split(g, "/"), strings.Split(p, "/"))
}

func matchParts(g, p []string) bool {
	for len(g) > 0 {
		if g[0] == "**" {
			if len(g) == 1 {
				return true
			}
			for i := 0; i <= len(p); i++ {
				if matchParts(g[1:], p[i:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 {
			return false
		}
		if ok, _ := path.Match(g[0], p[0]); !ok {
			return false
		}
		g, p = g[1:], p[1:]
	}
	// The glob named a directory: everything below it matches too.
	return true
}

func matchAny(globs []string, p string) (string, bool) {
	for _, g := range globs {
		if matchGlob(g, p) {
			return g, true
		}
	}
	return "", false
}
