package conformance

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/extauthz/extauthz/rulestore"
)

// relThrottleHits: throttled requests asking several tokens. Sentinel spaces a request from
// the one before by its own hits (the first request of a value is free, whatever it asks),
// extauthz by the hits of the request before; so their decisions differ request by request,
// and both pace at count per duration. Checked per value, with spacing sp = duration / count
// (whole milliseconds in these cases), maxQ = maxQueueingTimeMs, T the span from the value's
// first request to its last, g the gap between its requests and h the most hits one asks:
//   - on each side the hits admitted, H, are at most h + (T + maxQ) / sp: every admission
//     moves the value's schedule on by its hits' spacing, and the schedule never runs more than
//     maxQ ahead of the clock;
//   - and at least 1 + (T − h·sp) / (sp + g + x): under requests every g the schedule never
//     falls more than one request's spacing behind the clock, and an admission leaves it idle
//     at most g + x, where x is 0 for extauthz and (h − 1)·sp for Sentinel (a request too
//     heavy to pass leaves the schedule where it was, and a lighter one after it passes late);
//   - on extauthz's side, exactly: each admitted request is answered at least the spacing of
//     the admitted request before's hits after that one's answer, and waits at most maxQ.
const relThrottleHits = "throttle-hits"

// genThrottleHits: a throttle rule spacing whole milliseconds, with or without a queue, and
// two values each asked every g milliseconds (its own g) by requests of one to four hits.
func genThrottleHits(rng *rand.Rand) Case {
	dur := 1 + rng.IntN(2)
	sp := pick(rng, []int{10, 20, 25, 40, 50}) // ms
	count := 1000 * dur / sp
	maxQ := 0
	if rng.IntN(3) > 0 {
		maxQ = 10 * rng.IntN(31)
	}
	rule := map[string]any{"resource": "res", "paramIdx": 0, "grade": 1, "count": count,
		"controlBehavior": 2, "durationInSec": dur, "maxQueueingTimeMs": maxQ}
	span := int64(500 + rng.IntN(1001))
	var trace []Request
	for _, v := range []string{"a", "b"} {
		g := int64(5 + rng.IntN(sp))
		for t := int64(rng.IntN(int(g))); t <= span; t += g {
			trace = append(trace, Request{T: t, Resource: "res", Hits: 1 + rng.IntN(4), Args: [][]string{{v}}})
		}
	}
	slices.SortStableFunc(trace, func(a, b Request) int { return int(a.T - b.T) })
	return Case{ParamFlowRules: mustJSON([]any{rule}), Relation: relThrottleHits, Trace: trace}
}

// checkThrottleHits checks a throttle-hits case (see relThrottleHits).
func checkThrottleHits(tl *tally, c *Case, rules rulestore.Rules, s []Decision, e []Verdict) {
	if len(rules.ParamFlow) != 1 {
		tl.finding(c, -1, "a throttle-hits case has one throttle rule")
		return
	}
	rule := rules.ParamFlow[0]
	spacing := rule.Duration / time.Duration(rule.Count)
	sp := int64(spacing / time.Millisecond)
	maxQ := int64(rule.MaxQueueingTime / time.Millisecond)
	type value struct {
		first, last, gap, most int64 // ms, ms, ms, hits
		hs, he                 int64 // hits admitted: Sentinel, extauthz
		prevAt                 time.Duration
		prevHits               int64
		admitted               bool
	}
	values := map[string]*value{}
	var order []string
	for i, r := range c.Trace {
		k := r.Args[0][0]
		v := values[k]
		if v == nil {
			v = &value{first: r.T, last: r.T}
			values[k] = v
			order = append(order, k)
		} else {
			v.gap = max(v.gap, r.T-v.last)
			v.last = r.T
		}
		hits := int64(max(r.Hits, 1))
		v.most = max(v.most, hits)
		if s[i].Allow {
			v.hs += hits
		}
		if !e[i].Allow {
			continue
		}
		v.he += hits
		at := time.Duration(r.T)*time.Millisecond + e[i].Wait
		if e[i].Wait > rule.MaxQueueingTime {
			tl.finding(c, i, "extauthz held the request %v, more than maxQueueingTimeMs %v", e[i].Wait, rule.MaxQueueingTime)
		}
		if v.admitted && at-v.prevAt < time.Duration(v.prevHits)*spacing {
			tl.finding(c, i, "extauthz answered %v after the admitted request before, which asked %d hits: less than %v", at-v.prevAt, v.prevHits, time.Duration(v.prevHits)*spacing)
		}
		v.admitted, v.prevAt, v.prevHits = true, at, hits
	}
	for _, k := range order {
		v := values[k]
		span := v.last - v.first
		// lo ≤ H ≤ hi, in integers: (H − 1)(sp + g + x) ≥ T − h·sp and (H − h)·sp ≤ T + maxQ.
		for _, side := range []struct {
			name string
			h, x int64
		}{{"Sentinel", v.hs, (v.most - 1) * sp}, {"extauthz", v.he, 0}} {
			idle := sp + v.gap + side.x
			if (side.h-1)*idle < span-v.most*sp || (side.h-v.most)*sp > span+maxQ {
				tl.finding(c, -1, "value %q: %s admitted %d hits in %d ms (requests every %d ms, up to %d hits each); spacing %d ms and maxQueueingTimeMs %d give %d to %d",
					k, side.name, side.h, span, v.gap, v.most, sp, maxQ, 1+max(span-v.most*sp, 0)/idle, v.most+(span+maxQ)/sp)
			}
		}
		tl.throttleHits = append(tl.throttleHits, [2]int64{v.hs, v.he})
	}
}

// TestThrottleHitsExample: the README's example of throttled requests asking several tokens
// (testdata/cases/throttle.json, hits-spacing), decided by Sentinel's code and by extauthz.
func TestThrottleHitsExample(t *testing.T) {
	var c Case
	for _, x := range loadCases(t) {
		if x.Name == "throttle/hits-spacing" {
			c = x
		}
	}
	if c.Name == "" {
		t.Fatal("no case throttle/hits-spacing")
	}
	tl := runCases(t, []Case{c})
	tl.report(t)
	res, err := sentinel.Run([]Case{c}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Extauthz(&c)
	if err != nil {
		t.Fatal(err)
	}
	var s, e []bool
	for i := range c.Trace {
		s = append(s, res[c.Name].Decisions[i].Allow)
		e = append(e, got[i].Allow)
	}
	if want := []bool{true, false, true, true}; !slices.Equal(s, want) {
		t.Errorf("Sentinel admits %v, want %v", s, want)
	}
	if want := []bool{true, false, false, true}; !slices.Equal(e, want) {
		t.Errorf("extauthz admits %v, want %v", e, want)
	}
}
