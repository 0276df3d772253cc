package hotparam

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// BenchmarkFloodInnocents measures what a flood of new values costs values it does not touch:
// the share of innocent new values (one request each, 1,000 a second) refused although a
// limiter tracking every value would admit them, over 2s of simulated time after a second of
// flood. Floods are one-shot (each value asked once) or depleting (each value asked until its
// bucket is empty). It runs each case once, whatever b.N; the figures are the metrics.
func BenchmarkFloodInnocents(b *testing.B) {
	type scenario struct {
		name     string
		rule     Rule
		perValue int // requests per flood value
		rates    []int
	}
	r10 := qps(10, time.Second)
	r10.Capacity = 10_000
	r3h := qps(3, time.Hour)
	r3h.Capacity = 1000
	for _, sc := range []scenario{
		{"10/s,cap=10k,one-shot", r10, 1, []int{1_000, 10_000, 100_000, 300_000, 1_000_000}},
		{"10/s,cap=10k,depleting", r10, 10, []int{1_000, 10_000, 100_000, 300_000, 1_000_000}},
		{"3/h,cap=1k,one-shot", r3h, 1, []int{1, 10, 100, 1_000, 3_000, 10_000}},
	} {
		for _, rate := range sc.rates {
			b.Run(fmt.Sprintf("%s,flood=%d/s", sc.name, rate), func(b *testing.B) {
				refused, innocents := floodInnocents(b, sc.rule, rate, sc.perValue)
				b.ReportMetric(100*float64(refused)/float64(innocents), "%innocents-refused")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func floodInnocents(b *testing.B, r Rule, rate, perValue int) (refused, innocents int) {
	l := mustNew(b, r)
	const step = time.Millisecond // one innocent per step
	flood := 0
	owed := 0.0
	for i := range 3000 {
		now := at(time.Duration(i) * step)
		owed += float64(rate) * step.Seconds()
		for ; owed >= 1; owed-- {
			e := one("f"+strconv.Itoa(flood), 1)
			for range perValue {
				check(l, now, e)
			}
			flood++
		}
		if i < 1000 {
			continue
		}
		innocents++
		if d, _ := check(l, now, one("i"+strconv.Itoa(i), 1)); !d.Allowed {
			refused++
		}
	}
	return refused, innocents
}
