package policy

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// Rules is what an answer shows of the rules a call was decided by: their version, the name of
// each hot-parameter rule's limit and the params each resource's rules read. One is made per
// rule set and shared by every call decided by it; it is never changed once made, and safe for
// concurrent use. A nil *Rules is no rules.
type Rules struct {
	version uint64
	limiter *hotparam.Limiter // the set's; nil when it has none
	// limitNames holds, per hot-parameter rule, its name once an answer showed it (see
	// limitName): a rule that never applies costs no string.
	limitNames []atomic.Pointer[string]
	lookups    *ruleCache // the decision path's, of the same rule set
}

func answersOf(set *rulestore.Set) *Rules {
	return &Rules{version: set.Version, limiter: set.ParamFlow,
		limitNames: make([]atomic.Pointer[string], len(paramFlowRules(set)))}
}

// limitName is the name of hot-parameter rule i (below LimitRules) as an answer shows it:
// param_flow[INDEX] RESOURCE PARAM, made on its first use.
func (r *Rules) limitName(i int) string {
	if p := r.limitNames[i].Load(); p != nil {
		return *p
	}
	pr := &r.limiter.Rules()[i]
	name := "param_flow[" + strconv.Itoa(i) + "] " + pr.Resource + " " + pr.Param
	r.limitNames[i].CompareAndSwap(nil, &name)
	return *r.limitNames[i].Load()
}

// Version is the version of the rule set.
func (r *Rules) Version() uint64 {
	if r == nil {
		return 0
	}
	return r.version
}

// LimitRules is the number of hot-parameter rules: Limit.Rule is below it.
func (r *Rules) LimitRules() int {
	if r == nil {
		return 0
	}
	return len(r.limitNames)
}

// Reads reports whether a hot-parameter rule on resource reads param.
func (r *Rules) Reads(resource, param string) bool {
	if r == nil {
		return false
	}
	return r.limiter.Reads(resource, param)
}

// Limit is what the hot-parameter rule that applied to one entry says of it, as an answer
// shows it.
type Limit struct {
	Rule int    // the rule's index among the hot-parameter rules; -1 when none applied
	Name string // the rule as an answer names its limit: param_flow[INDEX] RESOURCE PARAM
	// Limit is the rule's count for the value (an exception item applied): its rate per
	// Duration, or its most in flight for a concurrency rule.
	Limit     int64
	Duration  time.Duration // the rule's duration
	Remaining int64         // whole tokens (or free slots) left after this request
	Reset     time.Duration // until the value is full again
}

// appendLimits appends the Limit of each status of st to ls.
func (r *Rules) appendLimits(ls []Limit, st []hotparam.Status) []Limit {
	for i := range st {
		s := &st[i]
		l := Limit{Rule: s.Rule, Limit: s.Limit, Duration: s.Duration, Remaining: s.Remaining, Reset: s.ResetAfter}
		if s.Rule >= 0 && s.Rule < len(r.limitNames) {
			l.Name = r.limitName(s.Rule)
		}
		ls = append(ls, l)
	}
	return ls
}

// ruleCache is what the decision path looks up in one rule set by resource.
type ruleCache struct {
	set      *rulestore.Set
	throttle map[string]int // resource -> its first enforcing throttle rule without a domain
	// domainThrottle: domain -> resource -> the first enforcing throttle rule that applies to
	// the domain's calls (its own or one without a domain), for the resources the domain's
	// throttle rules name; nil when no throttle rule has a domain.
	domainThrottle map[string]map[string]int
	// unenforced: the resources of concurrency rules (see watchConcurrency); nil when no
	// UnenforcedRecorder is set.
	unenforced map[string]*watch
	answers    *Rules // what the answers show of set
}

// cache returns the ruleCache of set, made once per rule set.
func (d *Decider) cache(set *rulestore.Set) *ruleCache {
	c := d.rulesCache.Load()
	if c != nil && c.set == set {
		return c
	}
	prev := c
	c = &ruleCache{set: set, throttle: make(map[string]int), answers: answersOf(set)}
	c.answers.lookups = c
	if d.unenforced != nil {
		c.unenforced = watches(set, prev)
	}
	for i, r := range paramFlowRules(set) {
		if r.Behavior != hotparam.Throttle || r.Shadow {
			continue
		}
		if r.Domain != "" {
			if c.domainThrottle == nil {
				c.domainThrottle = make(map[string]map[string]int)
			}
			m := c.domainThrottle[r.Domain]
			if m == nil {
				m = make(map[string]int)
				c.domainThrottle[r.Domain] = m
			}
			if _, ok := m[r.Resource]; !ok {
				m[r.Resource] = i
			}
			continue
		}
		if _, ok := c.throttle[r.Resource]; !ok {
			c.throttle[r.Resource] = i
		}
	}
	for _, m := range c.domainThrottle {
		for res, i := range m {
			if j, ok := c.throttle[res]; ok && j < i {
				m[res] = j
			}
		}
	}
	d.rulesCache.Store(c)
	return c
}

// paramFlowRules are the hot-parameter rules of set's limiter; nil without one.
func paramFlowRules(set *rulestore.Set) []hotparam.Rule {
	if set.ParamFlow == nil {
		return nil
	}
	return set.ParamFlow.Rules()
}
