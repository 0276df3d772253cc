package metrics

import (
	"cmp"
	"container/heap"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/hotparam"
)

// DefaultMaxRules is the most hot-param rules given series of their own when Options.MaxRules
// is 0.
const DefaultMaxRules = 100

// ruleCollector reads the hot-param counters at scrape time. It exports at most max rules
// under their own labels: those with the most evictions, then the most tracked values (the
// rules an operator must look at first); the others are summed under rule, resource and param
// Other.
type ruleCollector struct {
	stats     func() ([]hotparam.Rule, []hotparam.RuleStats)
	max       int
	tracked   *prometheus.Desc
	evictions *prometheus.Desc
	overflows *prometheus.Desc
	stateSize *prometheus.Desc
	hidden    *prometheus.Desc
}

func newRuleCollector(stats func() ([]hotparam.Rule, []hotparam.RuleStats), max int) *ruleCollector {
	labels := []string{"rule", "resource", "param"}
	return &ruleCollector{
		stats: stats,
		max:   max,
		tracked: prometheus.NewDesc("extauthz_hotparam_tracked_values",
			"Distinct values tracked now by a hot-param rule; rules past the cap are summed under rule=\"other\".", labels, nil),
		evictions: prometheus.NewDesc("extauthz_hotparam_evictions_total",
			"Values a hot-param rule evicted to stay within its capacity (since the rule's state was created); rules past the cap are summed under rule=\"other\", which drops when a rule leaves the sum.", labels, nil),
		overflows: prometheus.NewDesc("extauthz_hotparam_state_overflows_total",
			"States of evicted values a hot-param rule forgot, or new values it refused, because its state budget (hot_param.rule_state_budget, or hot_param.state_budget over all rules) was full; rules past the cap are summed under rule=\"other\".", labels, nil),
		stateSize: prometheus.NewDesc("extauthz_hotparam_state_bytes",
			"Bytes a hot-param rule holds for the states of values it evicted while not back to their default; rules past the cap are summed under rule=\"other\".", labels, nil),
		hidden: prometheus.NewDesc("extauthz_hotparam_rules_aggregated",
			"Hot-param rules whose series are summed under rule=\"other\" because of the cap on per-rule series.", nil, nil),
	}
}

func (c *ruleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tracked
	ch <- c.evictions
	ch <- c.overflows
	ch <- c.stateSize
	ch <- c.hidden
}

func (c *ruleCollector) Collect(ch chan<- prometheus.Metric) {
	rules, stats := c.stats()
	// top keeps the c.max rules to show, as a heap whose root is the least of them.
	top := ruleHeap(make([]hotparam.RuleStats, 0, min(c.max, len(stats))))
	var rest hotparam.RuleStats // the sum of the others
	hidden := 0
	for _, s := range stats {
		if s.Rule < 0 || s.Rule >= len(rules) {
			continue // stats of a rule we cannot name: skip rather than emit a bad label
		}
		if len(top) < c.max {
			heap.Push(&top, s)
			continue
		}
		if ahead(s, top[0]) {
			s, top[0] = top[0], s
			heap.Fix(&top, 0)
		}
		rest.Tracked += s.Tracked
		rest.Evictions += s.Evictions
		rest.Overflows += s.Overflows
		rest.StateBytes += s.StateBytes
		hidden++
	}
	slices.SortFunc(top, func(a, b hotparam.RuleStats) int { return cmp.Compare(a.Rule, b.Rule) })
	for _, s := range top {
		r := rules[s.Rule]
		c.emit(ch, strconv.Itoa(s.Rule), r.Resource, r.Param, s)
	}
	if hidden > 0 {
		c.emit(ch, Other, Other, Other, rest)
	}
	ch <- prometheus.MustNewConstMetric(c.hidden, prometheus.GaugeValue, float64(hidden))
}

// ahead reports whether a rule's series are shown before b's: more evictions, then more
// tracked values, then the earlier rule (a stable choice between scrapes of a quiet service).
func ahead(a, b hotparam.RuleStats) bool {
	if a.Evictions != b.Evictions {
		return a.Evictions > b.Evictions
	}
	if a.Tracked != b.Tracked {
		return a.Tracked > b.Tracked
	}
	return a.Rule < b.Rule
}

// ruleHeap is a min-heap of rule stats by ahead: its root is the one shown last.
type ruleHeap []hotparam.RuleStats

func (h ruleHeap) Len() int           { return len(h) }
func (h ruleHeap) Less(i, j int) bool { return ahead(h[j], h[i]) }
func (h ruleHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ruleHeap) Push(x any)        { *h = append(*h, x.(hotparam.RuleStats)) }
func (h *ruleHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (c *ruleCollector) emit(ch chan<- prometheus.Metric, rule, resource, param string, s hotparam.RuleStats) {
	// NewConstMetric rather than MustNewConstMetric: a rule name that is not valid UTF-8 is
	// left out, never a panic at scrape time.
	for _, v := range []struct {
		d *prometheus.Desc
		t prometheus.ValueType
		v float64
	}{
		{c.tracked, prometheus.GaugeValue, float64(s.Tracked)},
		{c.evictions, prometheus.CounterValue, float64(s.Evictions)},
		{c.overflows, prometheus.CounterValue, float64(s.Overflows)},
		{c.stateSize, prometheus.GaugeValue, float64(s.StateBytes)},
	} {
		if m, err := prometheus.NewConstMetric(v.d, v.t, v.v, rule, resource, param); err == nil {
			ch <- m
		}
	}
}
