package cuda

import (
	"fmt"
	"strings"
)

// Rule is one `name<op>value` condition of NVIDIA_REQUIRE_CUDA.
type Rule struct {
	Name  string `json:"name"`  // cuda, driver, arch, brand
	Op    string `json:"op"`    // = != < <= > >=
	Value string `json:"value"` // version or brand
}

func (r Rule) String() string { return r.Name + r.Op + r.Value }

// Requirement is a parsed NVIDIA_REQUIRE_CUDA value: an OR of terms, each
// an AND of rules (libnvidia-container src/cli/dsl.c).
type Requirement struct {
	Terms [][]Rule `json:"terms"`
}

// Host is what a requirement is evaluated against.
type Host struct {
	DriverVersion string // NVRM version, e.g. 550.54.15
	CUDAVersion   string // the driver's CUDA version, e.g. 12.4 (derived from DriverVersion when empty)
	Brand         string // NVML brand as spelled in brand clauses: tesla, geforce, nvidia, ...
	Arch          string // compute capability, e.g. 8.9
	// NoDevice evaluates with no GPU visible: libnvidia-container then
	// treats arch and brand rules as satisfied (configure.c,
	// check_device_arch/check_device_brand).
	NoDevice bool
}

var requireOps = []string{">=", "<=", "!=", ">", "<", "="}

// ParseRequireCUDA parses the NVIDIA_REQUIRE_CUDA DSL: whitespace separates
// OR-ed terms, commas separate AND-ed rules `name<op>value`.
func ParseRequireCUDA(s string) (Requirement, error) {
	var req Requirement
	for _, term := range strings.Fields(s) {
		var rules []Rule
		for _, raw := range strings.Split(term, ",") {
			if raw == "" {
				return Requirement{}, fmt.Errorf("NVIDIA_REQUIRE_CUDA: empty rule in %q", term)
			}
			r, err := parseRule(raw)
			if err != nil {
				return Requirement{}, err
			}
			rules = append(rules, r)
		}
		req.Terms = append(req.Terms, rules)
	}
	return req, nil
}

func parseRule(raw string) (Rule, error) {
	i := strings.IndexAny(raw, "<>=!")
	if i <= 0 {
		return Rule{}, fmt.Errorf("NVIDIA_REQUIRE_CUDA: rule %q: want name<op>value", raw)
	}
	name, rest := strings.ToLower(raw[:i]), raw[i:]
	for _, op := range requireOps {
		if strings.HasPrefix(rest, op) {
			val := rest[len(op):]
			if val == "" || strings.ContainsAny(val, "<>=!") {
				return Rule{}, fmt.Errorf("NVIDIA_REQUIRE_CUDA: rule %q: bad value", raw)
			}
			switch name {
			case "cuda", "driver", "arch":
				if _, err := ParseVersion(val); err != nil {
					return Rule{}, fmt.Errorf("NVIDIA_REQUIRE_CUDA: rule %q: %v", raw, err)
				}
			case "brand":
				if op != "=" && op != "!=" {
					return Rule{}, fmt.Errorf("NVIDIA_REQUIRE_CUDA: rule %q: brand only supports = and !=", raw)
				}
			default:
				return Rule{}, fmt.Errorf("NVIDIA_REQUIRE_CUDA: rule %q: unknown condition %q (want cuda, driver, arch or brand)", raw, name)
			}
			return Rule{Name: name, Op: op, Value: val}, nil
		}
	}
	return Rule{}, fmt.Errorf("NVIDIA_REQUIRE_CUDA: rule %q: unknown operator", raw)
}

func (r Requirement) String() string {
	terms := make([]string, len(r.Terms))
	for i, t := range r.Terms {
		rs := make([]string, len(t))
		for j, x := range t {
			rs[j] = x.String()
		}
		terms[i] = strings.Join(rs, ",")
	}
	return strings.Join(terms, " ")
}

// Satisfied reports whether h satisfies r (an empty requirement always
// does) and, when not, the first rule of the first term that failed, for
// the message libnvidia-container prints ("unsatisfied condition: ...").
func (r Requirement) Satisfied(h Host) (bool, *Rule) {
	if len(r.Terms) == 0 {
		return true, nil
	}
	if h.CUDAVersion == "" && h.DriverVersion != "" {
		h.CUDAVersion, _ = DriverCUDA(h.DriverVersion)
	}
	var first *Rule
	for _, term := range r.Terms {
		ok := true
		for _, rule := range term {
			if !rule.eval(h) {
				if first == nil {
					f := rule
					first = &f
				}
				ok = false
				break
			}
		}
		if ok {
			return true, nil
		}
	}
	return false, first
}

func (r Rule) eval(h Host) bool {
	if h.NoDevice && (r.Name == "brand" || r.Name == "arch") {
		return true
	}
	var have string
	switch r.Name {
	case "brand":
		eq := strings.EqualFold(h.Brand, r.Value)
		if r.Op == "!=" {
			return !eq
		}
		return eq
	case "cuda":
		have = h.CUDAVersion
	case "driver":
		have = h.DriverVersion
	case "arch":
		have = h.Arch
	}
	hv, err := ParseVersion(have)
	if err != nil {
		return false // unknown host value never satisfies a rule
	}
	c := hv.Compare(MustVersion(r.Value))
	switch r.Op {
	case "=":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// CUDAMin returns the version of the first `cuda>=` (or `cuda>`) rule, or "".
func (r Requirement) CUDAMin() string {
	for _, t := range r.Terms {
		for _, rule := range t {
			if rule.Name == "cuda" && (rule.Op == ">=" || rule.Op == ">") {
				return rule.Value
			}
		}
	}
	return ""
}

// MinDriver is the driver that the requirement's `cuda>=` clause needs
// natively (Table 3) and with minor-version compatibility.
func (r Requirement) MinDriver() (DriverReq, error) {
	c := r.CUDAMin()
	if c == "" {
		return DriverReq{}, fmt.Errorf("NVIDIA_REQUIRE_CUDA %q has no cuda>= clause", r.String())
	}
	return MinDriver(c)
}

// Branches lists the driver branches named by `driver>=N,driver<N+1` rules
// for brand, i.e. the branches the image's forward-compat libraries cover.
func (r Requirement) Branches(brand string) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range r.Terms {
		hasBrand := false
		for _, rule := range t {
			if rule.Name == "brand" && rule.Op == "=" && strings.EqualFold(rule.Value, brand) {
				hasBrand = true
			}
		}
		if !hasBrand {
			continue
		}
		for _, rule := range t {
			if rule.Name == "driver" && rule.Op == ">=" && !seen[rule.Value] {
				seen[rule.Value] = true
				out = append(out, rule.Value)
			}
		}
	}
	return out
}

// Brands lists the brands that appear in brand clauses.
func (r Requirement) Brands() []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range r.Terms {
		for _, rule := range t {
			if rule.Name == "brand" && rule.Op == "=" && !seen[rule.Value] {
				seen[rule.Value] = true
				out = append(out, rule.Value)
			}
		}
	}
	return out
}

// ImageRequireCUDA returns NVIDIA_REQUIRE_CUDA as set by the nvidia/cuda
// image of that version (ubuntu22.04 amd64, latest refresh), when kiln's
// data has it. Versions given as X.Y use the newest known X.Y.Z image. An
// X.Y.Z that kiln has no row for (a newer update, e.g. 13.0.3) gets the
// row of the newest older update of the same minor, marked inferred
// (confidence C): NVIDIA sets the brand clauses per CUDA minor.
func ImageRequireCUDA(cuda string) (Requirement, *ImageRequire, bool) {
	db := mustDB()
	var best *ImageRequire
	v, err := ParseVersion(cuda)
	if err != nil {
		return Requirement{}, nil, false
	}
	for i := range db.Drivers.RequireCUDA {
		ir := &db.Drivers.RequireCUDA[i]
		if ir.Image == cuda {
			best = ir
			break
		}
		if MajorMinor(ir.Image) == cuda && (best == nil || CompareVersions(ir.Image, best.Image) > 0) {
			best = ir
		}
	}
	if best == nil && len(v) >= 3 {
		for i := range db.Drivers.RequireCUDA {
			ir := &db.Drivers.RequireCUDA[i]
			if MajorMinor(ir.Image) == v.MajorMinor() && CompareVersions(ir.Image, cuda) < 0 && (best == nil || CompareVersions(ir.Image, best.Image) > 0) {
				best = ir
			}
		}
		if best != nil {
			inferred := *best
			inferred.Image = cuda
			inferred.Source = fmt.Sprintf("nvidia/cuda:%s is not in kiln's NVIDIA_REQUIRE_CUDA data; inferred from nvidia/cuda:%s (%s)", cuda, best.Image, best.Source)
			inferred.Confidence = ConfC
			best = &inferred
		}
	}
	if best == nil {
		return Requirement{}, nil, false
	}
	var b strings.Builder
	b.WriteString("cuda>=" + best.CUDAGE)
	for _, brand := range best.Brands {
		for _, br := range best.Branches {
			fmt.Fprintf(&b, " brand=%s,driver>=%d,driver<%d", brand, br, br+1)
		}
	}
	req, err := ParseRequireCUDA(b.String())
	if err != nil {
		panic(err)
	}
	return req, best, true
}
