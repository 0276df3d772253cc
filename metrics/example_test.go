package metrics_test

import (
	"fmt"
	"time"

	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/policy"
)

func Example() {
	m := metrics.New(metrics.Options{NoRuntime: true})
	m.SetResources([]string{"POST:/order"}) // the resources the rules in force name
	m.Decision("ratelimit", "edge", "POST:/order", policy.ParamFlow, 300*time.Microsecond)
	m.Decision("ratelimit", "edge", "GET:/anything", policy.Allowed, 100*time.Microsecond)

	families, _ := m.Registry().Gather()
	for _, f := range families {
		if f.GetName() != "extauthz_decisions_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			fmt.Println(labels["resource"], labels["result"], s.GetCounter().GetValue())
		}
	}
	// Unordered output:
	// POST:/order param_flow 1
	// other ok 1
}

func ExampleMetrics_Snapshot() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := metrics.New(metrics.Options{NoRuntime: true, Now: func() time.Time { return now }})
	m.SetResources([]string{"POST:/order"})
	m.Decision("ratelimit", "edge", "POST:/order", policy.Allowed, 0)
	m.Decision("ratelimit", "edge", "POST:/order", policy.ParamFlow, 0)
	now = now.Add(time.Second)
	m.Decision("ratelimit", "edge", "POST:/order", policy.Allowed, 0)

	for _, t := range m.Snapshot(now).Resources {
		n := len(t.Allowed)
		fmt.Printf("%s: allowed %v, blocked %v in the last two seconds; %+v\n",
			t.Resource, t.Allowed[n-2:], t.Blocked[n-2:], t.Totals)
	}
	// Output:
	// POST:/order: allowed [1 1], blocked [1 0] in the last two seconds; {OK:2 Shadow:0 Authority:0 ParamFlow:1 Invalid:0 Other:0}
}
