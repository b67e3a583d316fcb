package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// units are tried in order, so a longer suffix wins over its tail ("MiB"
// before "B", "MB" before "B").
var units = []struct {
	suffix string
	mult   float64
}{
	{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10},
	{"TI", 1 << 40}, {"GI", 1 << 30}, {"MI", 1 << 20}, {"KI", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"K", 1e3}, {"B", 1},
}

// max bounds what Parse accepts: far above any real size, far enough below
// 2^63 that the float conversion cannot overflow.
const max = 1 << 62

// Parse reads "0", "4096", "1.5G", "64M"/"64MB" (decimal, 10^6),
// "64Mi"/"64MiB" (binary, 2^20), likewise K, G, T; case and a space before
// the unit do not matter. Negative, NaN and absurdly large sizes are
// errors.
func Parse(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	// !(n >= 0) also catches NaN.
	if err != nil || !(n >= 0) || n*mult > max {
		return 0, fmt.Errorf("%q is not a size (use bytes or a unit: 500MB, 16MiB, 1.5G)", s)
	}
	return int64(n * mult), nil
}

// Format prints n with binary units and one decimal: "512 B", "1.5 KiB",
// "7.0 GiB".
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
