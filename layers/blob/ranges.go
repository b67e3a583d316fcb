package blob

import (
	"encoding/json"
	"os"
	"sort"
)

// Ranges is a sorted list of disjoint, non-adjacent [start, end) ranges.
type Ranges [][2]int64

// Add returns s with [a, b) added.
func (s Ranges) Add(a, b int64) Ranges {
	if a >= b {
		return s
	}
	out := make(Ranges, 0, len(s)+1)
	placed := false
	for _, r := range s {
		switch {
		case r[1] < a:
			out = append(out, r)
		case b < r[0]:
			if !placed {
				out = append(out, [2]int64{a, b})
				placed = true
			}
			out = append(out, r)
		default: // overlapping or adjacent: merge into [a, b)
			a, b = min(a, r[0]), max(b, r[1])
		}
	}
	if !placed {
		out = append(out, [2]int64{a, b})
		sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	}
	return out
}

// PrefixEnd is the end of the range holding off, or off when none does.
func (s Ranges) PrefixEnd(off int64) int64 {
	for _, r := range s {
		if r[0] <= off && off < r[1] {
			return r[1]
		}
	}
	return off
}

// Missing splits the complement of s in [0, size) into pieces of at most
// chunk bytes, in ascending order.
func (s Ranges) Missing(size, chunk int64) [][2]int64 {
	var out [][2]int64
	emit := func(a, b int64) {
		for a < b {
			e := min(a+chunk, b)
			out = append(out, [2]int64{a, e})
			a = e
		}
	}
	at := int64(0)
	for _, r := range s {
		emit(at, min(r[0], size))
		at = max(at, r[1])
	}
	emit(at, size)
	return out
}

// Bytes is how many bytes s covers.
func (s Ranges) Bytes() (n int64) {
	for _, r := range s {
		n += r[1] - r[0]
	}
	return n
}

// sidecar is the on-disk record of a chunked partial.
type sidecar struct {
	Size int64      `json:"size"`
	Done [][2]int64 `json:"done"`
}

// RangesPath is where a chunked partial's record lies.
func RangesPath(part string) string { return part + RangesSuffix }

// ReadRanges returns the recorded ranges, ok=false when there is no usable
// record (absent, unreadable, or for another size).
func ReadRanges(part string, size int64) (Ranges, bool) {
	b, err := os.ReadFile(RangesPath(part))
	if err != nil {
		return nil, false
	}
	var sc sidecar
	if json.Unmarshal(b, &sc) != nil || sc.Size != size {
		return nil, false
	}
	var s Ranges
	for _, r := range sc.Done {
		if r[0] < 0 || r[1] > size || r[0] >= r[1] {
			return nil, false
		}
		s = s.Add(r[0], r[1])
	}
	return s, true
}

// WriteRanges records done for the partial part of a size-byte blob
// (temp file + rename).
func WriteRanges(part string, size int64, done Ranges) error {
	b, err := json.Marshal(sidecar{Size: size, Done: done})
	if err != nil {
		return err
	}
	tmp := RangesPath(part) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, RangesPath(part))
}
