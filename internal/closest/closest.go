// Package closest finds, among known names, the one a mistyped name most likely meant, for the
// "did you mean" of configuration and rules errors.
package closest

import "strings"

// maxDistance is the edit distance below which a known name counts as close.
const maxDistance = 3

// Name returns the known name closest to name: one equal to it but for case first, else the
// one at the smallest edit distance below 3 (the first of equals), compared without case. It
// returns false when none is close.
func Name(name string, known []string) (string, bool) {
	best, bestDist := "", maxDistance
	lower := strings.ToLower(name)
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return k, true
		}
		if d := editDistance(lower, strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best, best != ""
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
