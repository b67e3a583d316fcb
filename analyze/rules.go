package analyze

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/localfile"
)

// Rules is a --ci rule set. Every field is optional; a zero field is not
// checked.
//
//	max_size: 4GB              # uncompressed size of all layers
//	max_compressed_size: 2GB   # what a pull moves
//	min_efficiency: 0.95       # dive's score
//	max_wasted_bytes: 100MB    # superseded copies
//	forbid: [dev_tools, headers, static_libs, weights, caches]
//	max_class_bytes: {docs: 50MB}
//	forbid_duplicate_cuda_libs: true
//	require_gpus: [h100, l4]   # every library with device code runs there
type Rules struct {
	MaxSize                 ByteSize                    `yaml:"max_size"`
	MaxCompressedSize       ByteSize                    `yaml:"max_compressed_size"`
	MinEfficiency           float64                     `yaml:"min_efficiency"`
	MaxWastedBytes          ByteSize                    `yaml:"max_wasted_bytes"`
	Forbid                  []classify.Class            `yaml:"forbid"`
	MaxClassBytes           map[classify.Class]ByteSize `yaml:"max_class_bytes"`
	ForbidDuplicateCUDALibs bool                        `yaml:"forbid_duplicate_cuda_libs"`
	// RequireGPUs fails when a shared library has no kernel (cubin or
	// PTX) for one of these GPUs (names or sm_XX); it turns on the
	// kernel scan.
	RequireGPUs []string `yaml:"require_gpus"`
}

// ByteSize is a size written as a number of bytes or with a unit (KB, MB,
// GB are powers of 1000; KiB, MiB, GiB of 1024).
type ByteSize int64

// UnmarshalYAML implements yaml's BytesUnmarshaler.
func (b *ByteSize) UnmarshalYAML(data []byte) error {
	s := strings.Trim(strings.TrimSpace(string(data)), `"'`)
	n, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = ByteSize(n)
	return nil
}

// ParseByteSize parses "1234", "500MB", "1.5GiB" (see bytesize.Parse).
func ParseByteSize(s string) (int64, error) { return bytesize.Parse(s) }

// LoadRules reads a rule file; errors name the file, line and field.
func LoadRules(file string) (*Rules, error) {
	b, err := localfile.ReadFile(file, "rules file", localfile.MaxPolicy)
	if err != nil {
		return nil, err
	}
	return ParseRules(file, b)
}

// ParseRules parses rules from b; name is used in errors.
func ParseRules(name string, b []byte) (*Rules, error) {
	var r Rules
	if err := yaml.UnmarshalWithOptions(b, &r, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("%s: %s", name, oneLine(yaml.FormatError(err, false, false)))
	}
	known := map[classify.Class]bool{}
	for _, c := range classify.AllClasses {
		known[c] = true
	}
	check := func(field string, c classify.Class) error {
		if !known[c] {
			return fmt.Errorf("%s: %s: unknown class %q (classes: %s)", name, field, c, classList())
		}
		return nil
	}
	for _, c := range r.Forbid {
		if err := check("forbid", c); err != nil {
			return nil, err
		}
	}
	for c := range r.MaxClassBytes {
		if err := check("max_class_bytes", c); err != nil {
			return nil, err
		}
	}
	for _, g := range r.RequireGPUs {
		if _, err := cuda.GPU(g); err != nil {
			return nil, fmt.Errorf("%s: require_gpus: %v", name, err)
		}
	}
	if r.MinEfficiency < 0 || r.MinEfficiency > 1 {
		return nil, fmt.Errorf("%s: min_efficiency: %v is outside 0..1", name, r.MinEfficiency)
	}
	return &r, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func classList() string {
	var s []string
	for _, c := range classify.AllClasses {
		s = append(s, string(c))
	}
	return strings.Join(s, ", ")
}

// Violation is one broken rule.
type Violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Check evaluates the rules against a report.
func (r *Rules) Check(rep *Report) []Violation {
	var v []Violation
	add := func(rule, format string, a ...any) {
		v = append(v, Violation{Rule: rule, Message: fmt.Sprintf(format, a...)})
	}
	if r.MaxSize > 0 && rep.UncompressedSize > int64(r.MaxSize) {
		add("max_size", "image is %s uncompressed, over the %s limit", bytesize.Format(rep.UncompressedSize), bytesize.Format(int64(r.MaxSize)))
	}
	if r.MaxCompressedSize > 0 && rep.CompressedSize > int64(r.MaxCompressedSize) {
		add("max_compressed_size", "image is %s compressed, over the %s limit", bytesize.Format(rep.CompressedSize), bytesize.Format(int64(r.MaxCompressedSize)))
	}
	if r.MinEfficiency > 0 && rep.Waste.Efficiency < r.MinEfficiency {
		add("min_efficiency", "efficiency %.4f is below %.4f", rep.Waste.Efficiency, r.MinEfficiency)
	}
	if r.MaxWastedBytes > 0 && rep.Waste.WastedBytes > int64(r.MaxWastedBytes) {
		add("max_wasted_bytes", "%s wasted by superseded files, over the %s limit", bytesize.Format(rep.Waste.WastedBytes), bytesize.Format(int64(r.MaxWastedBytes)))
	}
	byClass := map[classify.Class]ClassReport{}
	for _, c := range rep.Classes {
		byClass[c.Class] = c
	}
	for _, c := range r.Forbid {
		if cr := byClass[c]; cr.Files > 0 {
			ex := ""
			if len(cr.Top) > 0 {
				ex = ", e.g. " + cr.Top[0].Path
			}
			add("forbid", "%s: %d files, %s%s", c, cr.Files, bytesize.Format(cr.Bytes), ex)
		}
	}
	for _, c := range classify.AllClasses {
		lim, ok := r.MaxClassBytes[c]
		if ok && byClass[c].Bytes > int64(lim) {
			add("max_class_bytes", "%s: %s over the %s limit", c, bytesize.Format(byClass[c].Bytes), bytesize.Format(int64(lim)))
		}
	}
	for _, name := range r.RequireGPUs {
		g, _ := cuda.GPU(name)
		var gs *GPUSupport
		if rep.Kernels != nil {
			for i := range rep.Kernels.GPUs {
				if rep.Kernels.GPUs[i].GPU == g.Name {
					gs = &rep.Kernels.GPUs[i]
				}
			}
		}
		switch {
		case gs == nil:
			add("require_gpus", "%s: kernel coverage was not computed (analyze with --gpu %s)", g.Name, name)
		case !gs.Covered:
			// Profiling libraries without code for the GPU do not stop
			// it computing (host check says the same).
			if _, compute := SplitTooling(gs.Missing); len(compute) > 0 {
				add("require_gpus", "%s (%s): no kernel in %d shared libraries, e.g. %s", g.Name, g.ComputeCapability, len(compute), compute[0])
			}
		}
	}
	if r.ForbidDuplicateCUDALibs && len(rep.DuplicateCUDALibs) > 0 {
		add("forbid_duplicate_cuda_libs", "%d CUDA libraries shipped twice, e.g. %s", len(rep.DuplicateCUDALibs), rep.DuplicateCUDALibs[0].Soname)
	}
	return v
}
