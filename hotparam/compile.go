package hotparam

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync/atomic"
	"time"
)

// Defaults applied by New when a rule leaves the field zero.
const (
	DefaultLease    = 60 * time.Second
	DefaultCapacity = 100000
)

// Rule limits each value of one param of one resource.
type Rule struct {
	Resource string
	// Domain, when not empty, scopes the rule to the calls of that rate-limit domain
	// (CheckOptions.Domain); a rule without one applies to the calls of every domain, and to
	// those without a domain.
	Domain          string
	Param           string
	Grade           Grade
	Count           int64            // QPS: tokens per Duration; Concurrency: most in flight per value
	Duration        time.Duration    // QPS: the refill period of Count tokens
	Burst           int64            // QPS: extra bucket capacity
	Behavior        Behavior         // QPS only
	MaxQueueingTime time.Duration    // Throttle: longest wait
	Items           map[string]int64 // per-value exceptions to Count
	Lease           time.Duration    // Concurrency: an acquire never released is freed after this
	Capacity        int              // most distinct values tracked at once
	// StateBudget bounds, in bytes, the states kept of the values evicted while not back to
	// their default (16 bytes each, see flood.go); 0 means Options.RuleStateBudget.
	StateBudget int64
	Overflow    Overflow // what to do once StateBudget is full; OverflowDefault takes Options'
	Refund      bool     // QPS: Release entries give back what their lease took
	// Postpaid (QPS reject rules) charges what a call used after the fact: an entry asking
	// tokens (Hits > 0, not a Probe) is a charge, taken in full whatever is left and never
	// refused, the bucket going into debt down to one bucket below empty; a Probe is the
	// admission check, refused while less than its hits are left (while in debt). Releases
	// are ignored. See limit.charge.
	Postpaid bool
	Cluster  bool // state kept in the shared store (Remote)
	Shadow   bool // evaluated and reported, never blocks
	// Match, when not nil, limits only the values it matches; the others pass this rule
	// untouched (no state is kept for them).
	Match Matcher
}

// Matcher selects the values of a param that a rule limits. It must be safe for concurrent use.
type Matcher interface {
	Match(value string) bool
}

// identity is what a rule's state belongs to: a reload keeps the state of a rule whose identity
// is unchanged, whatever its thresholds.
type identity struct {
	resource string
	domain   string
	param    string
	grade    Grade
	behavior Behavior
	duration time.Duration
	cluster  bool
	postpaid bool
}

func identityOf(r *Rule) identity {
	return identity{r.Resource, r.Domain, r.Param, r.Grade, r.Behavior, r.Duration, r.Cluster, r.Postpaid}
}

// ruleState is a rule compiled for checking, with the state of its values.
type ruleState struct {
	rule  Rule
	index int
	kind  kind
	// takesRelease, leased, inFlight and statusDur are the kind's (see kindMethods), for the
	// rule: read by every Check.
	takesRelease, leased, inFlight bool
	statusDur                      time.Duration
	def                            limit             // for values without an exception item
	items                          map[string]*limit // exception items; nil when none
	// fbDef and fbItems are a cluster rule's limits on local state when the Remote fails
	// (see fallbackShare: the replicas together never exceed the rule).
	fbDef   limit
	fbItems map[string]*limit
	lease   int64 // ns
	maxQ    int64 // ns
	window  int64 // ns, of the Top counters
	// stateBudget (bytes) and overflow are the rule's, or the Options' defaults.
	stateBudget int64
	overflow    Overflow
	store       *store
	id          string // RemoteOp.RuleID
	ident       identity
	nth         int // how many earlier rules of the set share ident
}

// limitOf returns the threshold for value v; fallback selects a cluster rule's local fallback.
func (rs *ruleState) limitOf(v string, fallback bool) *limit {
	def, items := &rs.def, rs.items
	if fallback {
		def, items = &rs.fbDef, rs.fbItems
	}
	if items != nil {
		if l, ok := items[v]; ok {
			return l
		}
	}
	return def
}

// fallbackShare is one replica's share of a cluster rule of count and burst enforced on local
// state while the Remote fails, out of n replicas: count/n, and a burst that makes its capacity
// (count+burst)/n, both rounded down, so that the n replicas together never admit more than
// the rule (a count below n gives each replica 0: every request refused until the Remote is
// back). Worst case the other way: the fleet admits up to n-1 fewer a duration, and a value
// whose requests reach one replica gets that replica's share only.
func fallbackShare(count, burst, n int64) (int64, int64) {
	if n <= 1 {
		return count, burst
	}
	c := count / n
	return c, burst/n + (count%n+burst%n)/n
}

// compile checks and precomputes rule i. It does not give it a store.
// errPostpaid refuses a postpaid rule of another kind than reject, or with Refund.
var errPostpaid = errors.New("postpaid applies only to qps reject rules without refund")

func compile(i int, r Rule, opts *Options, nth int) (*ruleState, error) {
	replicas := opts.Replicas
	rs := &ruleState{rule: r, index: i, ident: identityOf(&r), nth: nth}
	wrap := func(err error) error {
		return fmt.Errorf("hotparam: rule %d (resource %q, param %q): %w", i, r.Resource, r.Param, err)
	}
	k, err := kindOf(&r)
	if err == nil {
		err = k.check(&r)
	}
	if err != nil {
		return nil, wrap(err)
	}
	rs.kind = k
	rs.takesRelease, rs.leased, rs.inFlight = k.takesRelease(&r), k.leased(&r), k.inFlight()
	rs.statusDur = k.statusDuration(&r)
	if r.Capacity < 0 || r.Lease < 0 || r.MaxQueueingTime < 0 {
		return nil, wrap(fmt.Errorf("negative capacity, lease or max queueing time"))
	}
	if replicas < 1 {
		replicas = 1
	}
	build := func(count int64) (limit, limit, error) {
		l, err := k.newLimit(count, r.Burst, r.Duration)
		if err == nil && r.Postpaid && l.full > MaxPostpaidUnits {
			err = errUnrepresentable
		}
		if err != nil || !r.Cluster {
			return l, l, err
		}
		c, b := fallbackShare(count, r.Burst, int64(replicas))
		fb, err := k.newLimit(c, b, r.Duration)
		return l, fb, err
	}
	if rs.def, rs.fbDef, err = build(r.Count); err != nil {
		return nil, wrap(err)
	}
	if len(r.Items) > 0 {
		rs.items = make(map[string]*limit, len(r.Items))
		if r.Cluster {
			rs.fbItems = make(map[string]*limit, len(r.Items))
		}
		for v, c := range r.Items {
			l, fb, err := build(c)
			if err != nil {
				return nil, wrap(fmt.Errorf("item %q: %w", v, err))
			}
			rs.items[v] = &l
			if r.Cluster {
				rs.fbItems[v] = &fb
			}
		}
	}
	rs.lease = int64(r.Lease)
	if rs.lease == 0 {
		rs.lease = int64(DefaultLease)
	}
	rs.maxQ = int64(r.MaxQueueingTime)
	if r.StateBudget < 0 || opts.RuleStateBudget < 0 || opts.StateBudget < 0 {
		return nil, wrap(fmt.Errorf("negative state budget"))
	}
	rs.stateBudget = cmp.Or(r.StateBudget, opts.RuleStateBudget, DefaultRuleStateBudget)
	rs.overflow = cmp.Or(r.Overflow, opts.Overflow, OverflowForget)
	if rs.overflow > OverflowRefuse {
		return nil, wrap(fmt.Errorf("unknown overflow %d", rs.overflow))
	}
	rs.window = int64(max(k.topWindow(&r), time.Second))
	if opts.TopWindow > 0 {
		rs.window = int64(max(opts.TopWindow, time.Second))
	}
	rs.id = ruleID(r, nth)
	return rs, nil
}

// ruleID is a rule's RemoteOp.RuleID: its quoted resource and param, grade, behavior, duration
// in ns and nth, joined by "|", and for a rule with a Domain "|d" and the quoted domain (so the
// IDs, and the shared store's keys, of rules without one are what they were before domains).
// It is built in one buffer (a reload may compile every rule).
func ruleID(r Rule, nth int) string {
	var arr [128]byte // on the stack: the string is the only allocation of a usual rule
	buf := arr[:0]
	buf = strconv.AppendQuote(buf, r.Resource)
	buf = append(buf, '|')
	buf = strconv.AppendQuote(buf, r.Param)
	buf = append(buf, '|')
	buf = strconv.AppendInt(buf, int64(r.Grade), 10)
	buf = append(buf, '|')
	buf = strconv.AppendInt(buf, int64(r.Behavior), 10)
	buf = append(buf, '|')
	buf = strconv.AppendInt(buf, int64(r.Duration), 10)
	buf = append(buf, '|')
	buf = strconv.AppendInt(buf, int64(nth), 10)
	if r.Domain != "" {
		buf = append(buf, "|d"...)
		buf = strconv.AppendQuote(buf, r.Domain)
	}
	if r.Postpaid {
		buf = append(buf, "|postpaid"...)
	}
	return string(buf)
}

// capacity is the rule's Capacity or the default.
func (rs *ruleState) capacity() int {
	if rs.rule.Capacity > 0 {
		return rs.rule.Capacity
	}
	return DefaultCapacity
}

// build compiles rules, taking the store of each rule from old (matched by identity and order)
// or making a fresh one. A rule equal to the one of old it takes the store of is not compiled
// again: its compiled form is shared.
//
// Rules of one identity share their resource, so matching works resource by resource: a
// resource with one rule in each set (the usual case) needs no map, and when every rule keeps
// its resource and place the index by resource of old is shared too. A reload of a large set
// with few changes so allocates little beyond the slices of the new Limiter.
func build(rules []Rule, opts Options, old *Limiter) (*Limiter, error) {
	l := &Limiter{rules: rules, opts: opts, byResource: resourceIndex(rules, old), scoped: scopeIndex(rules)}
	if old != nil && old.seq != nil {
		l.seq, l.budget = old.seq, old.budget
	} else {
		l.seq, l.budget = new(atomic.Uint64), new(budget)
	}
	nth, from := match(rules, l.byResource, old)
	retiredFrom(rules, nth, from, old)
	sameOpts := old != nil && max(old.opts.Replicas, 1) == max(opts.Replicas, 1) &&
		old.opts.TopWindow == opts.TopWindow && old.opts.RuleStateBudget == opts.RuleStateBudget &&
		old.opts.Overflow == opts.Overflow
	l.compiled = make([]*ruleState, len(rules))
	fresh := make([]bool, len(rules)) // compiled now, not shared
	for i := range rules {
		r := &rules[i]
		if prev := from[i]; prev != nil && sameOpts && sameRule(&prev.rule, r) {
			if prev.index != i {
				moved := *prev
				moved.index = i
				prev = &moved
			}
			l.compiled[i] = prev
			continue
		}
		rs, err := compile(i, *r, &opts, int(nth[i]))
		if err != nil {
			return nil, err
		}
		l.compiled[i] = rs
		fresh[i] = true
	}
	if err := checkRemote(l.compiled, opts.Remote); err != nil {
		return nil, err
	}
	l.retired = retire(l.compiled, old)
	l.budget.limit.Store(cmp.Or(opts.StateBudget, DefaultStateBudget))
	if opts.OnOverflow != nil {
		l.budget.report.Store(&opts.OnOverflow)
	} else {
		l.budget.report.Store(nil)
	}
	// Stores are resized only once the whole set compiled, so a failed reload changes nothing.
	// A rule shared with old (or moved, a copy of it) carries its store already: it is read by
	// the calls of old meanwhile, and only a rule compiled now, which nothing else reads yet, is
	// written.
	for i, rs := range l.compiled {
		prev := from[i]
		switch {
		case !fresh[i]:
		case prev != nil:
			rs.store = prev.store
			rs.store.setCapacity(rs.capacity())
		default:
			rs.store = newStore(l.seq.Add(1), rs.capacity(), l.budget)
		}
		rs.store.owner.Store(rs)
	}
	return l, nil
}

// resourceIndex returns the indices of rules by resource: old's own index when every rule has
// the resource of the rule at its place in old (the index is never modified once built).
func resourceIndex(rules []Rule, old *Limiter) map[string][]int32 {
	if old != nil && len(old.rules) == len(rules) {
		same := true
		for i := range rules {
			if rules[i].Resource != old.rules[i].Resource {
				same = false
				break
			}
		}
		if same {
			return old.byResource
		}
	}
	idx := make(map[string][]int32, len(rules))
	for i := range rules {
		idx[rules[i].Resource] = append(idx[rules[i].Resource], int32(i))
	}
	return idx
}

// match returns, for each rule, how many earlier rules share its identity (nth), and the
// compiled rule of old with the same identity and nth (from; nil when none, or old is nil).
func match(rules []Rule, byResource map[string][]int32, old *Limiter) (nth []int32, from []*ruleState) {
	nth = make([]int32, len(rules))
	from = make([]*ruleState, len(rules))
	type key struct {
		id  identity
		nth int
	}
	if len(byResource) == len(rules) {
		// One rule a resource: every nth is 0, and a rule matches old's rule of its resource,
		// found by one lookup (none when old's index is this one: no rule moved).
		for i := range rules {
			var prev *ruleState
			switch {
			case old == nil:
			case len(old.byResource) == len(old.rules) && len(old.rules) == len(rules) && old.rules[i].Resource == rules[i].Resource:
				prev = old.compiled[i]
			default:
				// Each group of old is scanned once at most, as no two new rules share it.
				id := identityOf(&rules[i])
				for _, j := range old.byResource[rules[i].Resource] {
					if c := old.compiled[j]; c.nth == 0 && c.ident == id {
						prev = c
						break
					}
				}
			}
			if prev != nil && prev.ident == identityOf(&rules[i]) {
				from[i] = prev
			}
		}
		return nth, from
	}
	for res, idx := range byResource {
		var was []int32
		if old != nil {
			was = old.byResource[res]
		}
		if len(idx) == 1 && len(was) <= 1 {
			if len(was) == 1 {
				if prev := old.compiled[was[0]]; prev.ident == identityOf(&rules[idx[0]]) {
					from[idx[0]] = prev
				}
			}
			continue
		}
		seen := make(map[identity]int32, len(idx))
		for _, i := range idx {
			id := identityOf(&rules[i])
			nth[i] = seen[id]
			seen[id]++
		}
		if len(was) == 0 {
			continue
		}
		kept := make(map[key]*ruleState, len(was))
		for _, j := range was {
			prev := old.compiled[j]
			kept[key{prev.ident, prev.nth}] = prev
		}
		for _, i := range idx {
			from[i] = kept[key{identityOf(&rules[i]), int(nth[i])}]
		}
	}
	return nth, from
}

// sameRule reports whether a and b compile alike. Rules with a Matcher are never the same (a
// Matcher may not be comparable).
func sameRule(a, b *Rule) bool {
	return a.Resource == b.Resource && a.Domain == b.Domain && a.Param == b.Param && a.Grade == b.Grade && a.Count == b.Count &&
		a.Duration == b.Duration && a.Burst == b.Burst && a.Behavior == b.Behavior &&
		a.MaxQueueingTime == b.MaxQueueingTime && a.Lease == b.Lease && a.Capacity == b.Capacity &&
		a.Refund == b.Refund && a.Postpaid == b.Postpaid && a.Cluster == b.Cluster && a.Shadow == b.Shadow &&
		a.StateBudget == b.StateBudget && a.Overflow == b.Overflow &&
		a.Match == nil && b.Match == nil && maps.Equal(a.Items, b.Items)
}

// checkRemote asks a Remote that implements RemoteChecker whether it can hold each Cluster rule
// at the rule's largest count (Count or its largest item).
func checkRemote(compiled []*ruleState, r Remote) error {
	rc, ok := r.(RemoteChecker)
	if !ok {
		return nil
	}
	for _, rs := range compiled {
		if !rs.rule.Cluster {
			continue
		}
		op := RemoteOp{
			RuleID:   rs.id,
			Grade:    rs.rule.Grade,
			Behavior: rs.rule.Behavior,
			Count:    rs.rule.Count,
			Burst:    rs.rule.Burst,
			Duration: rs.rule.Duration,
			MaxWait:  rs.rule.MaxQueueingTime,
			Lease:    durationOf(rs.lease),
			Hits:     1,
			Refund:   rs.rule.Refund,
			Postpaid: rs.rule.Postpaid,
			Shadow:   rs.rule.Shadow,
		}
		for _, c := range rs.rule.Items {
			op.Count = max(op.Count, c)
		}
		if err := rc.CheckOp(op); err != nil {
			return fmt.Errorf("hotparam: rule %d (resource %q, param %q): the shared store cannot hold it: %w",
				rs.index, rs.rule.Resource, rs.rule.Param, err)
		}
	}
	return nil
}

// A rule dropped by a reload (a source emptied by mistake, a rule deleted and put back) is
// retired: its state is kept, and swept as usual, so that a rule of the same identity and
// order that comes back takes it again instead of handing every value a fresh bucket. A
// retired rule is let go once Sweep has found its values back at their default (its store
// then tracks and parks nothing), that is, within its duration for a reject rule.

// retiredKey is what a retired rule is found again by.
type retiredKey struct {
	id  identity
	nth int
}

// retiredFrom gives each rule that matched no rule of old the retired rule of old with its
// identity and order, if any.
func retiredFrom(rules []Rule, nth []int32, from []*ruleState, old *Limiter) {
	if old == nil || len(old.retired) == 0 {
		return
	}
	byKey := make(map[retiredKey]*ruleState, len(old.retired))
	for _, rs := range old.retired {
		byKey[retiredKey{rs.ident, rs.nth}] = rs
	}
	for i := range rules {
		if from[i] == nil {
			from[i] = byKey[retiredKey{identityOf(&rules[i]), int(nth[i])}]
		}
	}
}

// retire returns the retired rules of a Limiter compiled from old: old's rules and retired
// rules whose stores no rule of compiled took, but for those whose stores are empty; of two of
// one identity and order, the one retired last.
func retire(compiled []*ruleState, old *Limiter) []*ruleState {
	if old == nil {
		return nil
	}
	taken := make(map[*store]bool, len(compiled))
	for _, rs := range compiled {
		taken[rs.store] = true
	}
	var out []*ruleState
	seen := make(map[retiredKey]bool)
	add := func(rs *ruleState) {
		k := retiredKey{rs.ident, rs.nth}
		if taken[rs.store] || seen[k] || rs.store.idle() {
			return
		}
		seen[k] = true
		taken[rs.store] = true
		out = append(out, rs)
	}
	for _, rs := range old.compiled {
		add(rs)
	}
	for _, rs := range old.retired {
		add(rs)
	}
	return out
}
