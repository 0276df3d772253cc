package metrics_test

import (
	"fmt"
	"time"

	"github.com/extauthz/extauthz/metrics"
)

func Example() {
	m := metrics.New(metrics.Options{NoRuntime: true})
	m.SetResources([]string{"POST:/order"}) // the resources the rules in force name
	m.Decision("ratelimit", "edge", "POST:/order", "param_flow", 300*time.Microsecond)
	m.Decision("ratelimit", "edge", "GET:/anything", "ok", 100*time.Microsecond)

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
