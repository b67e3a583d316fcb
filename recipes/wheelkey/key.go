package wheelkey

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Key is what determines a compiled wheel's bytes. Two builds with equal
// keys compile the same wheel; any field that differs makes another wheel.
// What does not change the bytes (MAX_JOBS, NVCC_THREADS, the machine's
// memory) is not in it, so builders of every size share one wheel.
type Key struct {
	Package string `json:"package"` // normalized: flash-attn
	Version string `json:"version"`
	// Source is the sha256 of the source archive pip compiles
	// ("sha256:HEX"), from the index that serves it.
	Source    string `json:"source"`
	Torch     string `json:"torch"`      // the torch the extension compiles against: 2.6.0
	TorchCUDA string `json:"torch_cuda"` // torch's CUDA variant: cu124
	CUDA      string `json:"cuda"`       // the toolkit (nvcc) in the compile image: 12.4.1
	Python    string `json:"python"`     // 3.12
	PythonABI string `json:"python_abi"` // cp312
	CXX11ABI  string `json:"cxx11_abi"`  // _GLIBCXX_USE_CXX11_ABI: 1 or 0
	Platform  string `json:"platform"`   // linux/amd64
	// Archs is the GPU architecture list compiled for (sorted: 80, 90).
	Archs []string `json:"archs"`
	// Builder is the image the wheel is compiled in (its OS, compiler and
	// C library): a wheel built against a newer glibc does not load on an
	// older one.
	Builder string `json:"builder"`
	// Flags are the build's environment and pip flags that change the
	// bytes (KEY=VALUE and --flag words, sorted).
	Flags []string `json:"flags"`
}

// Normalize returns k with its lists sorted and the package name in PEP
// 503 form, as Digest hashes it.
func (k Key) Normalize() Key {
	k.Package = NormalizeName(k.Package)
	k.Archs = sortedArchs(k.Archs)
	k.Flags = slices.Clone(k.Flags)
	slices.Sort(k.Flags)
	if k.Flags == nil {
		k.Flags = []string{}
	}
	return k
}

// sortedArchs orders architectures numerically (80 before 100).
func sortedArchs(a []string) []string {
	out := slices.Clone(a)
	if out == nil {
		out = []string{}
	}
	slices.SortFunc(out, func(x, y string) int {
		if len(x) != len(y) {
			return len(x) - len(y)
		}
		return strings.Compare(x, y)
	})
	return slices.Compact(out)
}

// NormalizeName is a project name in PEP 503 form (lower case, runs of
// -, _ and . as one -).
func NormalizeName(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r == '-' || r == '_' || r == '.' {
			dash = true
			continue
		}
		if dash && b.Len() > 0 {
			b.WriteByte('-')
		}
		dash = false
		b.WriteRune(r)
	}
	return b.String()
}

// JSON is the key's canonical JSON: the bytes Digest hashes and the
// manifest's KeyAnnotation holds.
func (k Key) JSON() string {
	b, _ := json.Marshal(k.Normalize())
	return string(b)
}

// Digest is the key's sha256, "sha256:HEX".
func (k Key) Digest() string {
	s := sha256.Sum256([]byte(k.JSON()))
	return "sha256:" + hex.EncodeToString(s[:])
}

// Tag is the artifact's tag: the package, then the key's hash (a tag
// holds at most 128 characters; the package prefix lets a lookup for a
// wider architecture list read only that package's wheels).
func (k Key) Tag() string {
	p := NormalizeName(k.Package)
	if len(p) > 40 {
		p = p[:40]
	}
	return p + "-" + strings.TrimPrefix(k.Digest(), "sha256:")
}

// Check says what is missing from k: a key without them would match
// wheels it should not.
func (k Key) Check() error {
	var miss []string
	for _, f := range []struct{ name, v string }{
		{"package", k.Package}, {"version", k.Version}, {"source", k.Source}, {"cuda", k.CUDA},
		{"python", k.Python}, {"python_abi", k.PythonABI}, {"platform", k.Platform}, {"builder", k.Builder},
	} {
		if f.v == "" {
			miss = append(miss, f.name)
		}
	}
	if len(k.Archs) == 0 {
		miss = append(miss, "archs")
	}
	if len(miss) > 0 {
		return fmt.Errorf("wheel cache key for %s: no %s", k.Package, strings.Join(miss, ", "))
	}
	return nil
}

// SameButArchs reports whether a and b differ at most in their
// architecture lists.
func SameButArchs(a, b Key) bool {
	a.Archs, b.Archs = nil, nil
	return a.JSON() == b.JSON()
}

// Covers reports whether have holds every architecture in want.
func Covers(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// Diff names the fields where a and b differ (JSON names), for messages
// that say why a cached wheel was not used.
func Diff(a, b Key) []string {
	var am, bm map[string]any
	_ = json.Unmarshal([]byte(a.JSON()), &am)
	_ = json.Unmarshal([]byte(b.JSON()), &bm)
	var out []string
	for k, v := range am {
		if fmt.Sprint(v) != fmt.Sprint(bm[k]) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
