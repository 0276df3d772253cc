package policy

import (
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// UnenforcedAfter is how long a concurrency rule's resource must see Check calls and no
// rate-limit call before the rule is reported as enforced by nothing.
const UnenforcedAfter = time.Minute

// UnenforcedRecorder is implemented by a Recorder that wants to know of concurrency rules that
// only ext_authz Check calls reach. Check has no completion signal, so the decision path leaves
// concurrency rules out of Check calls (Request.SkipConcurrency): such a rule limits nothing
// until its resource's requests also go through the rate-limit API.
type UnenforcedRecorder interface {
	// ConcurrencyUnenforced is called once for a resource whose concurrency rule (rule, its
	// first one, an index in the param-flow rules) has seen Check calls and no rate-limit call
	// for idle (at least UnenforcedAfter). It is called again for the resource only after a
	// rate-limit call reached it.
	ConcurrencyUnenforced(resource string, rule int, idle time.Duration)
}

// watch is what the decision path knows of one resource with a concurrency rule. Its fields
// are read and written without a lock: a report may come a call late, never twice in a row.
type watch struct {
	rule      atomic.Int64 // the resource's first concurrency rule; a reload's cache sets it anew
	checkFrom atomic.Int64 // the first Check call since the last rate-limit call (UnixNano); 0: none
	rateLimit atomic.Int64 // the last rate-limit call (UnixNano, to the second); 0: none
	reported  atomic.Bool  // reported since the last rate-limit call
}

// watches are the resources of set's concurrency rules, each keeping the state it had in prev
// (the rule set before), so that a reload neither repeats nor forgets a report.
func watches(set *rulestore.Set, prev *ruleCache) map[string]*watch {
	var out map[string]*watch
	for i, r := range paramFlowRules(set) {
		if r.Grade != hotparam.Concurrency {
			continue
		}
		if _, ok := out[r.Resource]; ok {
			continue
		}
		if out == nil {
			out = make(map[string]*watch)
		}
		w := &watch{}
		if prev != nil && prev.unenforced[r.Resource] != nil {
			w = prev.unenforced[r.Resource]
		}
		w.rule.Store(int64(i)) // a watch kept from prev is read by calls on the old rule set
		out[r.Resource] = w
	}
	return out
}

// watchConcurrency notes a call's resources that have a concurrency rule: a rate-limit call
// ends their watch, a Check call starts it or, once it has lasted UnenforcedAfter, reports it.
func (d *Decider) watchConcurrency(req *Request, set *rulestore.Set, now time.Time) {
	if d.unenforced == nil || set.ParamFlow == nil {
		return
	}
	c := d.cache(set)
	if len(c.unenforced) == 0 {
		return
	}
	t := now.UnixNano()
	for i := range req.Entries {
		w := c.unenforced[req.Entries[i].Resource]
		if w == nil {
			continue
		}
		if !req.SkipConcurrency {
			// Written at most once a second, so that busy resources do not contend on it.
			if last := w.rateLimit.Load(); t-last >= int64(time.Second) || t < last {
				w.rateLimit.Store(t)
				w.checkFrom.Store(0)
				w.reported.Store(false)
			}
			continue
		}
		from := w.checkFrom.Load()
		if from == 0 {
			w.checkFrom.CompareAndSwap(0, t)
			continue
		}
		idle := time.Duration(t - max(from, w.rateLimit.Load()))
		if idle >= UnenforcedAfter && !w.reported.Load() && w.reported.CompareAndSwap(false, true) {
			d.unenforced.ConcurrencyUnenforced(req.Entries[i].Resource, int(w.rule.Load()), idle)
		}
	}
}
