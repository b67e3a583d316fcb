package hostcheck

import (
	"fmt"
	"strconv"
	"strings"
)

// zstdFloor is the first version of each engine that pulls zstd layers:
// Docker 23.0 (moby 23 reads zstd blobs) and containerd 1.5.
var zstdFloor = map[string][2]int{EngineDocker: {23, 0}, EngineContainerd: {1, 5}}

// majorMinor reads the leading MAJOR.MINOR of an engine's version
// ("20.10.24+dfsg1", "v1.6.20", "1.6.20~ds1", "2.1.0").
func majorMinor(v string) (int, int, bool) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	num := func(s string) (int, bool) {
		end := 0
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(s[:end])
		return n, err == nil
	}
	ma, ok1 := num(parts[0])
	mi, ok2 := num(parts[1])
	return ma, mi, ok1 && ok2
}

// pullsZstd says whether engine e pulls zstd layers; known is false when
// its version cannot be read (or it is not a runtime).
func pullsZstd(e Engine) (ok, known bool) {
	floor, runtime := zstdFloor[e.Kind]
	ma, mi, parsed := majorMinor(e.Version)
	if !runtime || !parsed {
		return false, false
	}
	return ma > floor[0] || ma == floor[0] && mi >= floor[1], true
}

// zstdFloorText is "Docker ≥ 23.0" or "containerd ≥ 1.5".
func zstdFloorText(kind string) string {
	f := zstdFloor[kind]
	name := "Docker"
	if kind == EngineContainerd {
		name = "containerd"
	}
	return fmt.Sprintf("%s ≥ %d.%d", name, f[0], f[1])
}
