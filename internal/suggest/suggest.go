// Package suggest finds the word a user meant: the one did-you-mean rule
// of kiln's flags, subcommands and recipe fields.
package suggest

// Nearest is the candidate within edit distance 2 of typed, the nearest
// first (ties: the first in candidates), or "" when none is that near.
func Nearest(typed string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := Distance(typed, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance of a and b (bytes).
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
