package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
)

// Record is what each step of a kiln image was built from: the inputs a
// person changes (bases, apt list, pip pins by component, compiled
// wheels' keys, GPU architectures, the app files' digest) and, per step,
// a key of the step's own definition and one of everything before it
// (BuildKit's cache key, in kiln's terms: a step hits when its chain is
// unchanged).
type Record struct {
	V      int                          `json:"v"`
	Bases  map[string]string            `json:"bases"`
	Apt    []string                     `json:"apt,omitempty"`
	Pip    map[string][]string          `json:"pip,omitempty"`
	Wheels map[string]map[string]string `json:"wheels,omitempty"`
	Archs  []string                     `json:"archs,omitempty"`
	App    string                       `json:"app,omitempty"`
	Steps  []StepRecord                 `json:"steps"`
}

// StepRecord is one step's keys: Own is its definition's (command,
// mounts, copies, and for file steps the app files' digest), Reads the
// chain of the stage it mounts (the devel stage's wheelhouse), Chain its
// own, its Reads and every step's before it in the stage (and the stage
// base's).
type StepRecord struct {
	Name  string `json:"name"`
	Own   string `json:"own"`
	Reads string `json:"reads,omitempty"`
	Chain string `json:"chain"`
}

// NewRecord is the record of a build of p with in.
func NewRecord(p *recipes.Plan, in Inputs) (*Record, error) {
	L, err := Lower(p)
	if err != nil {
		return nil, err
	}
	r := &Record{V: 1, Bases: map[string]string{"devel": L.Devel.Base, "runtime": L.Runtime.Base}, Apt: slices.Clone(p.Apt), Archs: slices.Clone(p.CUDAArchs), App: in.AppDigest}
	for _, g := range groups(p) {
		if r.Pip == nil {
			r.Pip = map[string][]string{}
		}
		for _, pp := range g.pkgs {
			r.Pip[string(g.comp)] = append(r.Pip[string(g.comp)], pp.Requirement)
		}
	}
	r.Wheels = wheelKeys(p)
	stageKeys := map[string]string{}
	for _, st := range []Stage{L.Devel, L.Runtime} {
		chain := shortHash("stage", st.Name, st.Base, fmt.Sprint(st.Env))
		for _, s := range st.Steps {
			own, reads := stepKey(s, in, stageKeys)
			chain = shortHash(chain, own, reads)
			r.Steps = append(r.Steps, StepRecord{Name: s.Name, Own: own, Reads: reads, Chain: chain})
		}
		stageKeys[st.Name] = chain
	}
	return r, nil
}

// wheelKeys are what determine the wheels kiln compiles, by project
// (nil when none is built): version, torch and its CUDA variant, CUDA,
// Python, the C++ ABI, the architectures and the flags.
func wheelKeys(p *recipes.Plan) map[string]map[string]string {
	s := func(v *string) string {
		if v == nil {
			return ""
		}
		return *v
	}
	abi := ""
	if p.TorchCXX11ABI != nil {
		abi = fmt.Sprint(*p.TorchCXX11ABI)
	}
	var out map[string]map[string]string
	for _, pp := range p.Compiled() {
		k := map[string]string{
			"version": pp.Requirement, "torch": s(p.Torch) + "+" + s(p.TorchCUDAVariant), "cuda": p.CUDA,
			"python": p.Python, "cxx11_abi": abi, "archs": strings.Join(p.CUDAArchs, ";"),
			"flags": strings.Join(sourceEnv(p), " "),
		}
		if fab := p.FlashAttnBuild; pp.Name == "flash-attn" && fab != nil {
			env, _ := json.Marshal(fab.Env)
			k["version"], k["archs"] = s(p.FlashAttn), fab.CUDAArchs
			k["flags"] = strings.Join(fab.PipFlags, " ") + " " + string(env)
		}
		if out == nil {
			out = map[string]map[string]string{}
		}
		out[pp.Name] = k
	}
	return out
}

// stepKey is a step's own definition's key, and the chain of the stage
// it bind-mounts ("" for none).
func stepKey(s Step, in Inputs, stages map[string]string) (own, reads string) {
	parts := []string{s.Name, s.Shell, fmt.Sprint(s.HostNetwork), fmt.Sprint(s.Copies), fmt.Sprint(s.Dirs)}
	for _, m := range s.Mounts {
		parts = append(parts, m.Kind, m.Target, m.ID, m.Source)
		if m.Download != nil {
			parts = append(parts, fmt.Sprint(m.Download.Files))
		}
		if m.Kind == MountBind {
			reads = stages[m.ID]
		}
	}
	if len(s.Copies) > 0 {
		parts = append(parts, in.AppDigest)
	}
	return shortHash(parts...), reads
}

func shortHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		io.WriteString(h, p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ParseRecord reads a layers.LabelInputs value.
func ParseRecord(s string) (*Record, error) {
	var r Record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("label %s: %v", layers.LabelInputs, err)
	}
	if r.V != 1 {
		return nil, fmt.Errorf("label %s: record version %d (this kiln reads 1)", layers.LabelInputs, r.V)
	}
	return &r, nil
}

// Change is one input that differs between two records.
type Change struct {
	Input string `json:"input"` // base devel|runtime, apt, pip torch|extensions|extras, wheel flash-attn, archs, app
	What  string `json:"what"`  // in words: old → new, added, removed
}

// StepExplain is one step's hit or miss against an earlier image.
type StepExplain struct {
	Name string `json:"name"`
	Hit  bool   `json:"hit"`
	// Why says what made a miss: the inputs of this step that changed, or
	// the earlier step (or base) it follows.
	Why     string   `json:"why,omitempty"`
	Changed []string `json:"changed,omitempty"` // the Inputs of Changes behind it
}

// Explain compares the record of this build (now) with an earlier
// image's (was): per step, hit or miss and why, and the inputs that
// changed.
func Explain(was, now *Record) ([]StepExplain, []Change) {
	changes := diffRecords(was, now)
	old := map[string]StepRecord{}
	for _, s := range was.Steps {
		old[s.Name] = s
	}
	var out []StepExplain
	firstMiss := map[string]string{} // stage → first missed step
	for _, s := range now.Steps {
		stage, _, _ := strings.Cut(s.Name, ":")
		o, ok := old[s.Name]
		e := StepExplain{Name: s.Name, Hit: ok && o.Chain == s.Chain}
		switch {
		case e.Hit:
		case !ok:
			e.Why = "a step the earlier image did not have"
		case o.Own != s.Own:
			e.Changed = stepInputs(s.Name, changes)
			if len(e.Changed) > 0 {
				e.Why = "changed: " + strings.Join(e.Changed, ", ")
			} else {
				e.Why = "its command changed (another kiln or recipe setting)"
			}
		case o.Reads != s.Reads:
			e.Why = "the devel stage's wheelhouse it installs from changed"
		case firstMiss[stage] != "":
			e.Why = "follows " + firstMiss[stage]
		default:
			e.Why = upstream(stage, changes)
		}
		if !e.Hit && firstMiss[stage] == "" {
			firstMiss[stage] = s.Name
		}
		out = append(out, e)
	}
	return out, changes
}

// upstream names what is before a stage's first step: its base, or for
// the runtime stage the devel stage whose wheelhouse it reads.
func upstream(stage string, changes []Change) string {
	for _, c := range changes {
		if c.Input == "base "+stage {
			return "base image changed: " + c.What
		}
	}
	return "the stage's base or environment changed"
}

// stepInputs are the changed inputs a step reads.
func stepInputs(step string, changes []Change) []string {
	var reads []string
	switch {
	case strings.HasSuffix(step, "python and pip"):
		// The toolchain is installed when a wheel is compiled.
		reads = []string{"base devel"}
		for _, c := range changes {
			if strings.HasPrefix(c.Input, "wheel ") {
				reads = append(reads, c.Input)
			}
		}
	case strings.HasSuffix(step, "system packages"):
		reads = []string{"apt", "base runtime"}
	case strings.HasSuffix(step, "app files"):
		reads = []string{"app"}
	case strings.HasPrefix(step, "devel: compile "):
		// A wheel compiled from source (its own step: a wheel cache hit
		// replaces it).
		reads = []string{"wheel " + strings.TrimPrefix(step, "devel: compile "), "archs"}
	default:
		for _, comp := range []Component{ComponentTorch, ComponentExtensions, ComponentPip} {
			if strings.HasSuffix(step, " "+string(comp)) {
				reads = []string{pipInput(string(comp))}
				if comp == ComponentExtensions {
					reads = append(reads, "wheel flash-attn", "archs")
				}
				if comp == ComponentTorch || comp == ComponentExtensions {
					reads = append(reads, "archs")
				}
			}
		}
	}
	var out []string
	for _, c := range changes {
		if slices.Contains(reads, c.Input) && !slices.Contains(out, c.Input) {
			out = append(out, c.Input)
		}
	}
	return out
}

// diffRecords lists the inputs that differ, in a fixed order.
func diffRecords(was, now *Record) []Change {
	var out []Change
	for _, st := range []string{"devel", "runtime"} {
		if a, b := was.Bases[st], now.Bases[st]; a != b {
			out = append(out, Change{"base " + st, a + " → " + b})
		}
	}
	if d := listDiff(was.Apt, now.Apt); d != "" {
		out = append(out, Change{"apt", d})
	}
	for _, comp := range sortedKeys(was.Pip, now.Pip) {
		if d := pinDiff(was.Pip[comp], now.Pip[comp]); d != "" {
			out = append(out, Change{pipInput(comp), d})
		}
	}
	for _, w := range sortedKeys(was.Wheels, now.Wheels) {
		a, b := was.Wheels[w], now.Wheels[w]
		var ds []string
		for _, k := range sortedKeys(a, b) {
			if a[k] != b[k] {
				ds = append(ds, fmt.Sprintf("%s %s → %s", k, orDash(a[k]), orDash(b[k])))
			}
		}
		if len(ds) > 0 {
			out = append(out, Change{"wheel " + w, strings.Join(ds, "; ")})
		}
	}
	if a, b := strings.Join(was.Archs, ","), strings.Join(now.Archs, ","); a != b {
		out = append(out, Change{"archs", orDash(a) + " → " + orDash(b)})
	}
	if was.App != now.App {
		out = append(out, Change{"app", "files changed (" + shortDigest(was.App) + " → " + shortDigest(now.App) + ")"})
	}
	return out
}

// pipInput names a component's pins as a Change's input: pip torch, pip
// extensions, and the recipe's own requirements, pip extras.
func pipInput(comp string) string {
	if comp == string(ComponentPip) {
		return "pip extras"
	}
	return "pip " + comp
}

// pinDiff says how pins differ by package name: a → b, added, removed.
func pinDiff(a, b []string) string {
	name := func(req string) string {
		i := strings.IndexAny(req, "=<>!~[; @")
		if i < 0 {
			return req
		}
		return req[:i]
	}
	am, bm := map[string]string{}, map[string]string{}
	for _, r := range a {
		am[name(r)] = r
	}
	for _, r := range b {
		bm[name(r)] = r
	}
	var ds []string
	for _, n := range sortedKeys(am, bm) {
		switch x, y := am[n], bm[n]; {
		case x == y:
		case x == "":
			ds = append(ds, "+"+y)
		case y == "":
			ds = append(ds, "-"+x)
		default:
			ds = append(ds, x+" → "+y)
		}
	}
	return strings.Join(ds, ", ")
}

// listDiff says what was added to and removed from a list.
func listDiff(a, b []string) string {
	var ds []string
	for _, x := range b {
		if !slices.Contains(a, x) {
			ds = append(ds, "+"+x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			ds = append(ds, "-"+x)
		}
	}
	return strings.Join(ds, ", ")
}

func sortedKeys[V any](ms ...map[string]V) []string {
	set := map[string]bool{}
	for _, m := range ms {
		for k := range maps.Keys(m) {
			set[k] = true
		}
	}
	out := slices.Collect(maps.Keys(set))
	sort.Strings(out)
	return out
}

func orDash(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if d == "" {
		return "(none)"
	}
	return d[:min(12, len(d))]
}
