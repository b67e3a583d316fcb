package blob

import (
	"fmt"
	"testing"
)

func TestRangeSet(t *testing.T) {
	type op [2]int64
	cases := []struct {
		name    string
		adds    []op
		want    string
		prefix  int64 // prefixEnd(0)
		missing string
	}{
		{"empty", nil, "[]", 0, "[[0 4] [4 8] [8 10]]"},
		{"one", []op{{0, 3}}, "[[0 3]]", 3, "[[3 7] [7 10]]"},
		{"adjacent merge", []op{{0, 3}, {3, 5}}, "[[0 5]]", 5, "[[5 9] [9 10]]"},
		{"out of order", []op{{6, 8}, {0, 2}}, "[[0 2] [6 8]]", 2, "[[2 6] [8 10]]"},
		{"overlap merge", []op{{2, 5}, {4, 9}, {0, 1}}, "[[0 1] [2 9]]", 1, "[[1 2] [9 10]]"},
		{"bridge", []op{{0, 2}, {5, 7}, {2, 5}}, "[[0 7]]", 7, "[[7 10]]"},
		{"hole at start", []op{{1, 10}}, "[[1 10]]", 0, "[[0 1]]"},
		{"complete", []op{{0, 10}}, "[[0 10]]", 10, "[]"},
		{"empty range ignored", []op{{4, 4}}, "[]", 0, "[[0 4] [4 8] [8 10]]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s Ranges
			for _, a := range tc.adds {
				s = s.Add(a[0], a[1])
			}
			if got := fmt.Sprint([][2]int64(s)); got != tc.want {
				t.Errorf("set %s, want %s", got, tc.want)
			}
			if got := s.PrefixEnd(0); got != tc.prefix {
				t.Errorf("prefixEnd(0) = %d, want %d", got, tc.prefix)
			}
			if got := fmt.Sprint(s.Missing(10, 4)); got != tc.missing {
				t.Errorf("missing(10, 4) = %s, want %s", got, tc.missing)
			}
		})
	}
}
