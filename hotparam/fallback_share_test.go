package hotparam

import (
	"math"
	"testing"
)

// The replicas' shares of a cluster rule under the local fallback never add up to more than
// the rule, in rate (count) or in capacity (count+burst), and lose less than one of each per
// replica.
func TestFallbackShare(t *testing.T) {
	for _, tc := range []struct {
		count, burst, n int64
		c, b            int64
	}{
		{3, 0, 1, 3, 0},
		{3, 0, 0, 3, 0},
		{3, 0, 2, 1, 0}, // was 2 each: 4 admitted of 3
		{10, 2, 4, 2, 1},
		{1, 0, 3, 0, 0}, // below the replicas: refused while the Remote fails
		{0, 5, 2, 0, 2},
		{7, 7, 7, 1, 1},
		{5, 1, 3, 1, 1},
		{math.MaxInt64, math.MaxInt64, 2, math.MaxInt64 / 2, math.MaxInt64/2 + 1},
	} {
		c, b := fallbackShare(tc.count, tc.burst, tc.n)
		if c != tc.c || b != tc.b {
			t.Errorf("fallbackShare(%d, %d, %d) = %d, %d; want %d, %d", tc.count, tc.burst, tc.n, c, b, tc.c, tc.b)
		}
		n := max(tc.n, 1)
		if c*n > tc.count || float64(c+b)*float64(n) > float64(tc.count)+float64(tc.burst) {
			t.Errorf("fallbackShare(%d, %d, %d): %d replicas admit %d a duration, %d at once: more than the rule", tc.count, tc.burst, tc.n, n, c*n, (c+b)*n)
		}
		if tc.count-c*n >= n {
			t.Errorf("fallbackShare(%d, %d, %d): loses %d a duration, want fewer than %d", tc.count, tc.burst, tc.n, tc.count-c*n, n)
		}
	}
}
