package hotparam

import (
	"cmp"
	"errors"
	"fmt"
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

// ruleState is a rule compiled for checking, with the state of its values. It keeps what a
// Check, Sweep and eviction read, and nothing of its Rule else: the Rule is the Limiter's
// (Limiter.rules, at index), so that an idle rule costs little more than its Rule and its
// store. What only a cluster rule needs is behind cl; a rule's identity and ID are worked out
// from its Rule when they are needed.
type ruleState struct {
	param string
	match Matcher // the Rule's
	// takesRelease, leased and inFlight are the kind's (see kindMethods), for the rule; cluster,
	// shadow, refund and postpaid the Rule's: read by every Check.
	takesRelease, leased, inFlight    bool
	cluster, shadow, refund, postpaid bool
	kind                              kind
	overflow                          Overflow // the rule's, or the Options' default
	index                             int32    // in Limiter.rules
	nth                               int32    // how many earlier rules of the set share its identity
	statusDur                         time.Duration
	window                            int64             // ns, of the Top counters
	def                               limit             // for values without an exception item
	items                             map[string]*limit // exception items; nil when none
	lease                             int64             // ns
	maxQ                              int64             // ns
	stateBudget                       int64             // bytes: the rule's, or the Options' default
	store                             *store
	cl                                *clusterRule // nil unless the rule is a Cluster rule
	resource                          string
}

// clusterRule is what only a cluster rule needs.
type clusterRule struct {
	id string // RemoteOp.RuleID
	// fbDef and fbItems are the limits on local state when the Remote fails (see
	// fallbackShare: the replicas together never exceed the rule).
	fbDef   limit
	fbItems map[string]*limit
	// what a RemoteOp carries of the Rule
	grade    Grade
	behavior Behavior
	burst    int64
	duration time.Duration
}

// limitOf returns the threshold for value v; fallback selects a cluster rule's local fallback.
func (rs *ruleState) limitOf(v string, fallback bool) *limit {
	def, items := &rs.def, rs.items
	if fallback && rs.cl != nil {
		def, items = &rs.cl.fbDef, rs.cl.fbItems
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

func compile(i int, r *Rule, opts *Options, nth int) (*ruleState, error) {
	replicas := opts.Replicas
	rs := &ruleState{param: r.Param, match: r.Match, resource: r.Resource, index: int32(i), nth: int32(nth),
		cluster: r.Cluster, shadow: r.Shadow, refund: r.Refund, postpaid: r.Postpaid}
	wrap := func(err error) error {
		return fmt.Errorf("hotparam: rule %d (resource %q, param %q): %w", i, r.Resource, r.Param, err)
	}
	k, err := kindOf(r)
	if err == nil {
		err = k.check(r)
	}
	if err != nil {
		return nil, wrap(err)
	}
	rs.kind = k
	rs.takesRelease, rs.leased, rs.inFlight = k.takesRelease(r), k.leased(r), k.inFlight()
	rs.statusDur = k.statusDuration(r)
	if r.Capacity < 0 || r.Lease < 0 || r.MaxQueueingTime < 0 {
		return nil, wrap(fmt.Errorf("negative capacity, lease or max queueing time"))
	}
	if replicas < 1 {
		replicas = 1
	}
	if r.Cluster {
		rs.cl = &clusterRule{id: ruleID(*r, nth), grade: r.Grade, behavior: r.Behavior, burst: r.Burst, duration: r.Duration}
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
	var fb limit
	if rs.def, fb, err = build(r.Count); err != nil {
		return nil, wrap(err)
	}
	if rs.cl != nil {
		rs.cl.fbDef = fb
	}
	if len(r.Items) > 0 {
		rs.items = make(map[string]*limit, len(r.Items))
		if rs.cl != nil {
			rs.cl.fbItems = make(map[string]*limit, len(r.Items))
		}
		for v, c := range r.Items {
			l, fb, err := build(c)
			if err != nil {
				return nil, wrap(fmt.Errorf("item %q: %w", v, err))
			}
			rs.items[v] = &l
			if rs.cl != nil {
				rs.cl.fbItems[v] = &fb
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
	rs.window = int64(max(k.topWindow(r), time.Second))
	if opts.TopWindow > 0 {
		rs.window = int64(max(opts.TopWindow, time.Second))
	}
	return rs, nil
}

// ruleID is a rule's RemoteOp.RuleID: its quoted resource and param, grade, behavior, duration
// in ns and nth, joined by "|", and for a rule with a Domain "|d" and the quoted domain (so the
// IDs, and the shared store's keys, of rules without one are what they were before domains).
// It is built in one buffer (a reload may compile every rule); only a cluster rule keeps it.
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

// capacityOf is r's Capacity or the default.
func capacityOf(r *Rule) int {
	if r.Capacity > 0 {
		return r.Capacity
	}
	return DefaultCapacity
}

// idOf is the RemoteOp.RuleID of rule i, whether it is a cluster rule or not.
func (l *Limiter) idOf(i int) string { return ruleID(l.rules[i], int(l.compiled[i].nth)) }

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
		if prev := from[i].rs; prev != nil && sameOpts && sameRule(from[i].rule, r) {
			if int(prev.index) != i {
				moved := *prev
				moved.index = int32(i)
				prev = &moved
			}
			l.compiled[i] = prev
			continue
		}
		rs, err := compile(i, r, &opts, int(nth[i]))
		if err != nil {
			return nil, err
		}
		l.compiled[i] = rs
		fresh[i] = true
	}
	if err := checkRemote(rules, l.compiled, opts.Remote); err != nil {
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
		prev := from[i].rs
		switch {
		case !fresh[i]:
		case prev != nil:
			rs.store = prev.store
			rs.store.setCapacity(capacityOf(&rules[i]))
		default:
			rs.store = newStore(l.seq.Add(1), capacityOf(&rules[i]), l.budget)
		}
		rs.store.owner.Store(rs)
	}
	return l, nil
}

// checkRemote asks a Remote that implements RemoteChecker whether it can hold each Cluster rule
// at the rule's largest count (Count or its largest item).
func checkRemote(rules []Rule, compiled []*ruleState, r Remote) error {
	rc, ok := r.(RemoteChecker)
	if !ok {
		return nil
	}
	for i, rs := range compiled {
		rule := &rules[i]
		if !rule.Cluster {
			continue
		}
		op := RemoteOp{
			RuleID:   rs.cl.id,
			Grade:    rule.Grade,
			Behavior: rule.Behavior,
			Count:    rule.Count,
			Burst:    rule.Burst,
			Duration: rule.Duration,
			MaxWait:  rule.MaxQueueingTime,
			Lease:    durationOf(rs.lease),
			Hits:     1,
			Refund:   rule.Refund,
			Postpaid: rule.Postpaid,
			Shadow:   rule.Shadow,
		}
		for _, c := range rule.Items {
			op.Count = max(op.Count, c)
		}
		if err := rc.CheckOp(op); err != nil {
			return fmt.Errorf("hotparam: rule %d (resource %q, param %q): the shared store cannot hold it: %w",
				i, rule.Resource, rule.Param, err)
		}
	}
	return nil
}
