package hotparam

import (
	"container/heap"
	"slices"
	"strings"
	"time"
)

// TopValue is one value's counts in the recent window, and what it has left now.
type TopValue struct {
	Value   string
	Passed  uint64
	Blocked uint64
	// Remaining is what the value has left at Top's instant, as Status.Remaining: whole
	// tokens (reject), single requests admitted within the queueing time (throttle), free
	// slots (concurrency).
	Remaining int64
}

// RuleTop lists a rule's busiest values.
type RuleTop struct {
	Rule      int
	Resource  string
	Param     string
	ByPassed  []TopValue
	ByBlocked []TopValue
}

// Top returns, per rule, the n busiest values by passed and by blocked requests in the recent
// window: the current and the previous window of the rule (its Duration, at least a second; a
// second for concurrency rules). Values counted only in older windows are left out. It walks the
// tracked values of each rule, taking each shard's lock in turn.
func (l *Limiter) Top(now time.Time, n int) []RuleTop {
	out := make([]RuleTop, len(l.compiled))
	t := now.UnixNano()
	for i, rs := range l.compiled {
		out[i] = RuleTop{Rule: i, Resource: rs.resource, Param: rs.param}
		if n <= 0 {
			continue
		}
		w := uint32(t / rs.window)
		byPassed := topHeap{passed: true}
		byBlocked := topHeap{}
		shards := rs.store.current()
		for j := range shards {
			sh := &shards[j]
			sh.mu.Lock()
			for k := range sh.used {
				sl := sh.at(int32(k))
				if sl.where == inFree {
					continue
				}
				p, b := sl.recent(w)
				if p == 0 && b == 0 {
					continue
				}
				v := TopValue{Value: strings.Clone(sl.key.view(&sh.long)), Passed: p, Blocked: b, Remaining: rs.kind.remaining(rs, sh, int32(k), t)}
				if p > 0 {
					byPassed.offer(v, n)
				}
				if b > 0 {
					byBlocked.offer(v, n)
				}
			}
			sh.mu.Unlock()
		}
		out[i].ByPassed = byPassed.sorted()
		out[i].ByBlocked = byBlocked.sorted()
	}
	return out
}

// recent is the passed and blocked counts in window w and the one before.
func (s *counters) recent(w uint32) (passed, blocked uint64) {
	switch {
	case s.win == w:
		return uint64(s.passed) + uint64(s.prevPassed), uint64(s.blocked) + uint64(s.prevBlocked)
	case s.win+1 == w:
		return uint64(s.passed), uint64(s.blocked)
	}
	return 0, 0
}

// topHeap keeps the n largest values by one count: a min-heap whose root is the smallest kept.
type topHeap struct {
	passed bool // by Passed, else by Blocked
	vs     []TopValue
}

// less orders a below b when a is the less busy (ties: the larger value string is less).
func (h *topHeap) less(a, b *TopValue) bool {
	ka, kb := a.Blocked, b.Blocked
	if h.passed {
		ka, kb = a.Passed, b.Passed
	}
	if ka != kb {
		return ka < kb
	}
	return a.Value > b.Value
}

func (h *topHeap) Len() int           { return len(h.vs) }
func (h *topHeap) Less(i, j int) bool { return h.less(&h.vs[i], &h.vs[j]) }
func (h *topHeap) Swap(i, j int)      { h.vs[i], h.vs[j] = h.vs[j], h.vs[i] }
func (h *topHeap) Push(x any)         { h.vs = append(h.vs, x.(TopValue)) }
func (h *topHeap) Pop() any {
	v := h.vs[len(h.vs)-1]
	h.vs = h.vs[:len(h.vs)-1]
	return v
}

func (h *topHeap) offer(v TopValue, n int) {
	if len(h.vs) < n {
		heap.Push(h, v)
		return
	}
	if h.less(&h.vs[0], &v) {
		h.vs[0] = v
		heap.Fix(h, 0)
	}
}

// sorted returns the kept values, busiest first.
func (h *topHeap) sorted() []TopValue {
	vs := h.vs
	slices.SortFunc(vs, func(a, b TopValue) int {
		if h.less(&a, &b) {
			return 1
		}
		if h.less(&b, &a) {
			return -1
		}
		return strings.Compare(a.Value, b.Value)
	})
	return vs
}
