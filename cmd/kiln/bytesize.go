package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseByteSize reads a byte count as people type it: "0", "4096",
// "64M"/"64MB" (decimal, 10^6), "64Mi"/"64MiB" (binary, 2^20), likewise K,
// G, T. Case does not matter.
func parseByteSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	units := []struct {
		suffix string
		mult   int64
	}{
		{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10},
		{"TI", 1 << 40}, {"GI", 1 << 30}, {"MI", 1 << 20}, {"KI", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
		{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"K", 1e3}, {"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || n*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q is not a byte size (e.g. 16MiB, 100M, 1G)", s)
	}
	return int64(n * float64(mult)), nil
}
