package conformance

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// seed is CONFORMANCE_SEED when set, else a fixed seed, so that a run is repeatable; the test
// logs it.
func seed(t *testing.T) uint64 {
	s := uint64(20240101)
	if v := os.Getenv("CONFORMANCE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CONFORMANCE_SEED: %v", err)
		}
		s = n
	}
	t.Logf("random cases from seed %d (set CONFORMANCE_SEED to change it)", s)
	return s
}

// randomCases makes n cases of each kind from seed.
func randomCases(seed uint64, n int) []Case {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	kinds := []struct {
		name string
		gen  func(*rand.Rand) Case
	}{
		{"authority", genAuthority},
		{"param", genParam},
		{"gateway", genGateway},
		{"throttle", genThrottle},
		{"refill", genRefill},
		{"throttle-hits", genThrottleHits},
	}
	var cases []Case
	for i := range n {
		k := kinds[i%len(kinds)]
		c := k.gen(rng)
		c.Name = fmt.Sprintf("random/%s-%d", k.name, i)
		cases = append(cases, c)
	}
	return cases
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// genAuthority: one or two rules on a resource, limitApp lists written with the spacings and
// entries found in real files, and callers asking with each.
func genAuthority(rng *rand.Rand) Case {
	entries := []string{"appA", "appB", "appC", "10.0.0.0/8", "10.9.9.9", "svc-1"}
	seps := []string{",", ", ", " ,"}
	var rules []map[string]any
	for range 1 + rng.IntN(2) {
		var b strings.Builder
		for j := range 1 + rng.IntN(3) {
			if j > 0 {
				b.WriteString(pick(rng, seps))
			}
			b.WriteString(pick(rng, entries))
		}
		if rng.IntN(5) == 0 {
			b.WriteString(",")
		}
		rules = append(rules, map[string]any{"resource": "res", "limitApp": b.String(), "strategy": rng.IntN(2)})
	}
	origins := append(slices.Clone(entries), " appB", "appB ", "10.1.2.3", "app", "appA,appB", "")
	var trace []Request
	for _, o := range origins {
		trace = append(trace, Request{T: 0, Resource: "res", Origin: o})
	}
	rng.Shuffle(len(trace), func(i, j int) { trace[i], trace[j] = trace[j], trace[i] })
	return Case{AuthorityRules: mustJSON(rules), Trace: trace}
}

// burstTimes spreads requests over bursts: each burst at one instant, the next one late enough
// for every bucket of the case to be full again on both sides.
func burstTimes(rng *rand.Rand, n int, gap int64) []int64 {
	var ts []int64
	t := int64(0)
	for len(ts) < n {
		for range min(3+rng.IntN(6), n-len(ts)) {
			ts = append(ts, t)
		}
		t += gap
	}
	return ts
}

// genParam: one or two param-flow rules on a resource (count, burst, multi-second durations,
// exception items typed int or String), bursts of requests with one or two values.
func genParam(rng *rand.Rand) Case {
	nRules := 1 + rng.IntN(2)
	argTypes := []string{"String", "String"}
	numeric := []string{"7", "07", "8", "+8", "08", "9"}
	text := []string{"a", "b", "c"}
	var rules []map[string]any
	maxCap, maxDur := int64(1), int64(1)
	for i := range nRules {
		count := rng.IntN(5)
		burst := rng.IntN(3)
		dur := 1 + rng.IntN(3)
		r := map[string]any{"resource": "res", "paramIdx": i, "grade": 1, "count": count,
			"burstCount": burst, "durationInSec": dur}
		class := pick(rng, []string{"", "String", "int"})
		var items []map[string]any
		for range rng.IntN(3) {
			it := map[string]any{"count": rng.IntN(7)}
			if class == "int" {
				it["object"] = pick(rng, numeric)
				it["classType"] = "int"
			} else {
				it["object"] = pick(rng, text)
				if class != "" {
					it["classType"] = "java.lang.String"
				}
			}
			items = append(items, it)
			maxCap = max(maxCap, int64(it["count"].(int)+burst))
		}
		if class == "int" {
			argTypes[i] = "int"
		}
		if items != nil {
			r["paramFlowItemList"] = dedupeObjects(items)
		}
		rules = append(rules, r)
		maxCap = max(maxCap, int64(count+burst))
		maxDur = max(maxDur, int64(dur))
	}
	multi := nRules > 1
	ts := burstTimes(rng, 8+rng.IntN(20), maxDur*1000*(maxCap+2))
	var trace []Request
	for _, t := range ts {
		r := Request{T: t, Resource: "res", Hits: 1 + rng.IntN(2)*rng.IntN(2)}
		for i := range nRules {
			pool := text
			if argTypes[i] == "int" {
				pool = numeric
			}
			vs := []string{pick(rng, pool)}
			if rng.IntN(4) == 0 {
				vs = append(vs, pick(rng, pool))
				multi = true
			}
			r.Args = append(r.Args, vs)
		}
		trace = append(trace, r)
	}
	c := Case{ParamFlowRules: mustJSON(rules), ArgTypes: argTypes[:nRules], Trace: trace}
	if multi {
		c.Relation = relSuperset
	}
	return c
}

// dedupeObjects keeps one item per object text (items equal after parsing are a case of their
// own, under testdata).
func dedupeObjects(items []map[string]any) []map[string]any {
	seen := map[string]bool{}
	var out []map[string]any
	for _, it := range items {
		k := it["object"].(string)
		if n, err := strconv.Atoi(k); err == nil {
			k = strconv.Itoa(n)
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, it)
		}
	}
	return out
}

// genGateway: a gateway rule reading the client IP, host, a header, a URL param or a cookie,
// with or without a pattern (each match strategy), or none (the whole route).
func genGateway(rng *rand.Rand) Case {
	strategy := rng.IntN(6) // 5: no paramItem
	count := 1 + rng.IntN(3)
	dur := 1 + rng.IntN(2)
	burst := rng.IntN(2)
	rule := map[string]any{"resource": "route", "resourceMode": 0, "count": count, "intervalSec": dur, "burst": burst}
	values := []string{"vip", "vip1", "v1", "bob", "xvipx"}
	if strategy == 0 {
		values = []string{"10.0.0.1", "10.0.0.2", "10.0.0.10"}
	}
	if strategy == 1 {
		values = []string{"a.example", "b.example", "a.example.org"}
	}
	if strategy < 5 {
		item := map[string]any{"parseStrategy": strategy}
		if strategy >= 2 {
			item["fieldName"] = pick(rng, []string{"X-User", "uid"})
		}
		if rng.IntN(3) > 0 {
			ms := rng.IntN(4)
			item["matchStrategy"] = ms
			item["pattern"] = pick(rng, values)
			if ms == 2 {
				item["pattern"] = pick(rng, []string{"v[0-9]+", "vip.*", "10\\.0\\.0\\.[0-9]", "a\\..*"})
			}
			if ms == 1 || ms == 3 {
				item["pattern"] = pick(rng, []string{"vip", "10.0.0.1", "a.example", "v"})
			}
		}
		rule["paramItem"] = item
	}
	ts := burstTimes(rng, 8+rng.IntN(16), int64(dur)*1000*int64(count+burst+2))
	var trace []Request
	for _, t := range ts {
		v := pick(rng, values)
		g := &GatewayRequest{}
		switch strategy {
		case 0:
			g.IP = v
		case 1:
			g.Host = v
		case 2:
			g.Headers = map[string]string{"X-User": v, "uid": v}
		case 3:
			g.Query = map[string]string{"X-User": v, "uid": v}
		case 4:
			g.Cookies = map[string]string{"X-User": v, "uid": v}
		}
		trace = append(trace, Request{T: t, Resource: "route", Gateway: g})
	}
	return Case{GatewayRules: mustJSON([]any{rule}), Trace: trace}
}

// genThrottle: a throttle rule whose spacing is whole milliseconds (where both space alike),
// with a queueing time, and requests of one or two values at random instants, one hit each
// (with more, Sentinel spaces a request from the one before by its own hits, extauthz by the
// one before's: see testdata/cases/throttle.json).
func genThrottle(rng *rand.Rand) Case {
	dur := 1 + rng.IntN(2)
	divisors := []int{1, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 125, 200, 250, 500}
	count := pick(rng, divisors) * dur
	if rng.IntN(2) == 0 {
		count = pick(rng, divisors)
	}
	maxQ := 10 * rng.IntN(31)
	rule := map[string]any{"resource": "res", "paramIdx": 0, "grade": 1, "count": count,
		"controlBehavior": 2, "durationInSec": dur, "maxQueueingTimeMs": maxQ}
	spacing := 1000 * dur / count
	n := 10 + rng.IntN(20)
	var ts []int64
	for range n {
		ts = append(ts, int64(rng.IntN(n*spacing/2+1)))
	}
	slices.Sort(ts)
	var trace []Request
	for _, t := range ts {
		trace = append(trace, Request{T: t, Resource: "res", Args: [][]string{{pick(rng, []string{"a", "b"})}}})
	}
	return Case{ParamFlowRules: mustJSON([]any{rule}), Trace: trace}
}

// genRefill: a reject rule and requests of one or two values at random instants, where
// Sentinel's window-edge refill and extauthz's continuous one differ.
func genRefill(rng *rand.Rand) Case {
	count := 1 + rng.IntN(5)
	dur := 1 + rng.IntN(3)
	rule := map[string]any{"resource": "res", "paramIdx": 0, "grade": 1, "count": count,
		"burstCount": rng.IntN(3), "durationInSec": dur}
	n := 15 + rng.IntN(30)
	var ts []int64
	for range n {
		ts = append(ts, int64(rng.IntN(4000*dur)))
	}
	slices.Sort(ts)
	var trace []Request
	for _, t := range ts {
		trace = append(trace, Request{T: t, Resource: "res", Args: [][]string{{pick(rng, []string{"a", "b"})}}})
	}
	return Case{ParamFlowRules: mustJSON([]any{rule}), Relation: relRefill, Trace: trace}
}

// spacingCases: a throttle rule queueing up to 10 ms, and four requests of one value every
// millisecond for a second, at counts whose spacing is no whole number of milliseconds (400/s:
// 2.5 ms; 3/s: 333.3 ms), and at counts of 2000/s and more, where Sentinel's rounded spacing
// reaches 1 ms and then 0.
func spacingCases() []Case {
	var cases []Case
	for _, count := range []int{3, 7, 400, 1500, 2000, 2500, 3000} {
		rule := map[string]any{"resource": "res", "paramIdx": 0, "grade": 1, "count": count,
			"controlBehavior": 2, "maxQueueingTimeMs": 10}
		var trace []Request
		for t := range int64(1000) {
			for range 4 {
				trace = append(trace, Request{T: t, Resource: "res", Args: [][]string{{"a"}}})
			}
		}
		cases = append(cases, Case{Name: fmt.Sprintf("spacing/%d-per-second", count),
			ParamFlowRules: mustJSON([]any{rule}), Relation: relSpacing, Trace: trace})
	}
	return cases
}
