package hotparam

import (
	"cmp"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// A flood scenario runs on an injected clock: flood values (each asked once, taking one
// token) arrive at a steady rate for a while; innocent values arrive at their own steady rate
// from the start to well after the flood, each asking a few requests at once and asking again
// a while later (before its bucket refills a token) as many requests as it has tokens left,
// and one more. The reference is an exact limiter, one that tracks every value for ever, fed
// with what the limiter admitted: it admits an innocent's first requests up to Count, and on its
// return exactly the tokens left. A refusal it would not make is an innocent short of its
// allowance (refused on its first request, the worst case); an admission it would not make is
// a wrong allow.

// floodScenario is one run.
type floodScenario struct {
	rule      Rule
	opts      Options
	floodRate int           // new flood values a second
	floodFor  time.Duration // how long the flood lasts
	innocents int           // new innocent values a second
	asks      int           // requests of an innocent on arrival; 0 means the rule's Count
	runFor    time.Duration // how long innocents arrive, from the flood's start
	back      time.Duration // when an innocent asks again, after its first requests
}

// floodResult counts what the limiter got wrong against the exact reference.
type floodResult struct {
	innocents, refused, short int // innocents; refused on their first request; refused anything the reference admits
	returns, wrongAllows      int // innocents asking again; requests admitted that the reference refuses
	lastShort                 time.Duration
	flood                     int // flood values sent
}

func (r floodResult) refusedPct() float64 { return pct(r.refused, r.innocents) }
func (r floodResult) shortPct() float64   { return pct(r.short, r.innocents) }

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func (r floodResult) String() string {
	return fmt.Sprintf("%d innocents: %d (%.1f%%) refused on their first request, %d (%.1f%%) given less than their allowance (the last at +%v); %d returns, %d wrong allows; %d flood values",
		r.innocents, r.refused, r.refusedPct(), r.short, r.shortPct(), r.lastShort, r.returns, r.wrongAllows, r.flood)
}

// runFlood runs sc on a fresh Limiter, in steps of 10ms.
func runFlood(tb testing.TB, sc floodScenario) floodResult {
	tb.Helper()
	l, err := New([]Rule{sc.rule}, sc.opts)
	if err != nil {
		tb.Fatal(err)
	}
	if sc.back*time.Duration(sc.rule.Count) >= sc.rule.Duration {
		tb.Fatalf("innocents come back after %v, when their bucket has refilled a token", sc.back)
	}
	const step = 10 * time.Millisecond
	var res floodResult
	type pending struct {
		v    string
		at   time.Duration
		left int // the reference's tokens
	}
	var returns []pending // innocents to ask again, in order of their instant
	floodOwed, innOwed := 0.0, 0.0
	count := int(sc.rule.Count + sc.rule.Burst)
	asks := sc.asks
	if asks == 0 {
		asks = count
	}
	for el := time.Duration(0); el < sc.runFor+sc.back; el += step {
		now := at(el)
		if el < sc.floodFor {
			for floodOwed += float64(sc.floodRate) * step.Seconds(); floodOwed >= 1; floodOwed-- {
				check(l, now, one("f"+strconv.Itoa(res.flood), 1))
				res.flood++
			}
		}
		for innOwed += float64(sc.innocents) * step.Seconds(); el < sc.runFor && innOwed >= 1; innOwed-- {
			v := "i" + strconv.Itoa(res.innocents)
			res.innocents++
			got := 0
			for j := range asks {
				if d, _ := check(l, now, one(v, 1)); d.Allowed {
					got++
				} else if j == 0 {
					res.refused++
				}
			}
			if got < min(asks, count) {
				res.short++
				res.lastShort = el
			}
			returns = append(returns, pending{v, el + sc.back, count - got})
		}
		for len(returns) > 0 && returns[0].at <= el {
			p := returns[0]
			returns = returns[1:]
			res.returns++
			got := 0
			for range p.left + 1 {
				if d, _ := check(l, now, one(p.v, 1)); d.Allowed {
					got++
				}
			}
			res.wrongAllows += max(got-p.left, 0)
		}
	}
	return res
}

// rule3h is {count: 3, duration: 1h} tracking capacity values (0: the default).
func rule3h(capacity int) Rule {
	r := qps(3, time.Hour)
	r.Capacity = capacity
	return r
}

// TestNewValuesWithoutFloodAreAdmitted: with no attacker at all, 100 never-seen values a
// second on {count: 3, duration: 1h, capacity: 1000}, each asking once (or its whole
// allowance), for 10 minutes: every one is admitted, and a minute later gets exactly the
// tokens it has left.
func TestNewValuesWithoutFloodAreAdmitted(t *testing.T) {
	for _, asks := range []int{1, 3} {
		t.Run("asks="+strconv.Itoa(asks), func(t *testing.T) {
			res := runFlood(t, floodScenario{rule: rule3h(1000), innocents: 100, asks: asks, runFor: 10 * time.Minute, back: time.Minute})
			t.Log(res)
			if res.refused != 0 || res.short != 0 || res.wrongAllows != 0 || res.returns == 0 {
				t.Fatalf("%v; want every innocent admitted its allowance and no wrong allow", res)
			}
		})
	}
}

// TestFloodRefusesNoInnocent: 60 s of 10,000 new values a second on a rule of 3 an hour, at the
// default capacity and at a capacity of 1,000; innocents arrive throughout and for 30 minutes
// after. None is refused or short of its allowance, and none is admitted again too early.
func TestFloodRefusesNoInnocent(t *testing.T) {
	if testing.Short() {
		t.Skip("600,000 flood values")
	}
	for _, capacity := range []int{0, 1000} {
		t.Run("capacity="+strconv.Itoa(capacity), func(t *testing.T) {
			res := runFlood(t, floodScenario{rule: rule3h(capacity), floodRate: 10_000, floodFor: time.Minute,
				innocents: 10, runFor: 31 * time.Minute, back: time.Minute})
			t.Log(res)
			if res.refused != 0 || res.short != 0 || res.wrongAllows != 0 || res.returns == 0 {
				t.Fatalf("%v; want every innocent admitted its allowance and no wrong allow", res)
			}
		})
	}
}

// BenchmarkFloodTable measures innocents refused and wrong allows by flood rate and duration
// (the README's table in "Floods and eviction"): a rule of 3 an hour, flood values asked once,
// 10 innocents a second for 30 minutes from the flood's start (or a minute past its end, if
// later), each asking its 3 and once more a minute later. It runs each case once, whatever b.N; the
// figures are the metrics.
func BenchmarkFloodTable(b *testing.B) {
	for _, capacity := range []int{0, 1000} {
		for _, c := range []struct {
			rate int
			dur  time.Duration
		}{{1000, 10 * time.Second}, {1000, time.Minute}, {10_000, 10 * time.Second}, {10_000, time.Minute}, {10_000, 10 * time.Minute}, {100_000, 10 * time.Second}, {100_000, time.Minute}} {
			b.Run(fmt.Sprintf("capacity=%d,flood=%d/s,for=%v", cmp.Or(capacity, DefaultCapacity), c.rate, c.dur), func(b *testing.B) {
				res := runFlood(b, floodScenario{rule: rule3h(capacity), floodRate: c.rate, floodFor: c.dur,
					innocents: 10, runFor: max(30*time.Minute, c.dur+time.Minute), back: time.Minute})
				b.ReportMetric(res.refusedPct(), "%refused")
				b.ReportMetric(res.shortPct(), "%short")
				b.ReportMetric(float64(res.wrongAllows), "wrong-allows")
				b.ReportMetric(res.lastShort.Seconds(), "last-short-s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
