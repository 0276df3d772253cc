package redisstore

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// Running and shrinking the sequences of the randomized parity test (parity_random_test.go).

// rpRunner runs sequences of calls on fresh pairs, each under keys of its own.
type rpRunner struct {
	t      *testing.T
	addr   string
	cache  int
	prefix string
	rules  []hotparam.Rule
	runs   int
}

// run runs calls on a fresh pair and returns the index of the first call whose difference is
// bad, and that difference (-1 when there is none).
func (r *rpRunner) run(calls []rpCall, bad func(rpDiff) bool) (int, rpDiff) {
	r.runs++
	pr := newRPPair(r.t, r.addr, r.cache, r.prefix+"-"+strconv.Itoa(r.runs), r.rules)
	defer pr.store.Close()
	for i := range calls {
		if diff, _ := pr.check(&calls[i]); !diff.none() && bad(diff) {
			return i, diff
		}
	}
	return -1, rpDiff{}
}

// shrink returns a shorter sequence of calls whose last call still differs badly, and that
// difference, trying for at most budget: calls left out, then entries, values, deadlines, hits
// and probes made simpler.
func (r *rpRunner) shrink(calls []rpCall, bad func(rpDiff) bool, budget time.Duration) ([]rpCall, rpDiff) {
	end := time.Now().Add(budget)
	var last rpDiff
	fails := func(try []rpCall) bool {
		i, d := r.run(try, bad)
		if i < 0 {
			return false
		}
		calls, last = try[:i+1], d
		return true
	}
	if !fails(calls) {
		return calls, last
	}
	for chunk := max(len(calls)/2, 1); ; chunk = max(chunk/2, 1) {
		changed := false
		for start := 0; start < len(calls)-1 && time.Now().Before(end); {
			stop := min(start+chunk, len(calls)-1) // the last call, which differs, stays
			if fails(slices.Concat(calls[:start], calls[stop:])) {
				changed = true
				continue
			}
			start = stop
		}
		if (chunk == 1 && !changed) || !time.Now().Before(end) {
			break
		}
	}
	// simpler calls: one change at a time, kept when the engines still differ
	simpler := func(i int, change func(c *rpCall) bool) {
		if i >= len(calls) || !time.Now().Before(end) {
			return
		}
		try := slices.Clone(calls)
		c := try[i]
		c.entries = slices.Clone(c.entries)
		for j := range c.entries {
			c.entries[j].params = slices.Clone(c.entries[j].params)
		}
		if change(&c) {
			try[i] = c
			fails(try)
		}
	}
	for i := 0; i < len(calls); i++ {
		for j := len(calls[i].entries) - 1; j >= 0; j-- {
			simpler(i, func(c *rpCall) bool {
				if len(c.entries) < 2 || j >= len(c.entries) {
					return false
				}
				c.entries = slices.Delete(c.entries, j, j+1)
				return true
			})
		}
		simpler(i, func(c *rpCall) bool {
			had := c.hasDeadline
			c.hasDeadline, c.deadline = false, 0
			return had
		})
		for j := 0; i < len(calls) && j < len(calls[i].entries); j++ {
			for k := 0; i < len(calls) && j < len(calls[i].entries) && k < len(calls[i].entries[j].params); k++ {
				for v := len(calls[i].entries[j].params[k].Values) - 1; v >= 0; v-- {
					simpler(i, func(c *rpCall) bool {
						if j >= len(c.entries) || k >= len(c.entries[j].params) || v >= len(c.entries[j].params[k].Values) ||
							len(c.entries[j].params[k].Values) < 2 {
							return false
						}
						p := &c.entries[j].params[k]
						p.Values = slices.Delete(slices.Clone(p.Values), v, v+1)
						return true
					})
				}
			}
			simpler(i, func(c *rpCall) bool {
				if j >= len(c.entries) || c.entries[j].hits == 1 {
					return false
				}
				c.entries[j].hits = 1
				return true
			})
			simpler(i, func(c *rpCall) bool {
				if j >= len(c.entries) || !c.entries[j].probe {
					return false
				}
				c.entries[j].probe = false
				return true
			})
		}
	}
	return calls, last
}

func formatCalls(calls []rpCall) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString("\t" + c.String() + ",\n")
	}
	return b.String()
}
