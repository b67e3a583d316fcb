package cuda

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a numeric dotted version such as 12.4, 12.4.1 or 550.54.15.
// Missing trailing components compare as zero, the way libnvidia-container
// compares versions in NVIDIA_REQUIRE_CUDA rules.
type Version []int

// ParseVersion parses a dotted numeric version ("12.4", "550.54.15").
func ParseVersion(s string) (Version, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty version")
	}
	parts := strings.Split(s, ".")
	v := make(Version, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || len(p) > 9 {
			return nil, fmt.Errorf("invalid version %q: want numbers separated by dots", s)
		}
		v[i] = n
	}
	return v, nil
}

// MustVersion is ParseVersion for versions that are known to parse: the
// embedded data (its tests parse every row) and constants. It panics
// otherwise, because a bad row is a bug in kiln's data, not an input error.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// Compare returns -1, 0 or 1.
func (v Version) Compare(o Version) int {
	n := max(len(v), len(o))
	for i := range n {
		a, b := 0, 0
		if i < len(v) {
			a = v[i]
		}
		if i < len(o) {
			b = o[i]
		}
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
	}
	return 0
}

func (v Version) String() string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ".")
}

// Major returns the first component.
func (v Version) Major() int {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// MajorMinor returns "X.Y".
func (v Version) MajorMinor() string {
	if len(v) == 1 {
		return fmt.Sprintf("%d.0", v[0])
	}
	return fmt.Sprintf("%d.%d", v[0], v[1])
}

// CompareVersions compares two dotted version strings; unparsable strings
// sort first (among themselves, as strings), so a sort of data rows never
// fails on one bad value.
func CompareVersions(a, b string) int {
	va, ea := ParseVersion(a)
	vb, eb := ParseVersion(b)
	switch {
	case ea != nil && eb != nil:
		return strings.Compare(a, b)
	case ea != nil:
		return -1
	case eb != nil:
		return 1
	}
	return va.Compare(vb)
}

// MajorMinor of a dotted string ("12.4.1" -> "12.4"); the input is returned
// unchanged when it does not parse, so it can key a lookup that then fails
// with the caller's own message.
func MajorMinor(s string) string {
	v, err := ParseVersion(s)
	if err != nil {
		return s
	}
	return v.MajorMinor()
}
