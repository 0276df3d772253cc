// Package metrics records the service's Prometheus metrics on a registry of its own.
package metrics

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/extauthz/extauthz/hotparam"
)

// Other is the label value that stands for every resource not named by the rules in force, and
// for domains past MaxDomains, so that callers cannot grow the label sets without bound.
const Other = "other"

// MaxDomains is the most distinct rate-limit domains given a label value of their own.
const MaxDomains = 32

// Options configure Metrics.
type Options struct {
	// RuleStats returns the hot-param rules in force and their counters; it is called at scrape
	// time. Nil means no per-rule metrics.
	RuleStats func() ([]hotparam.Rule, []hotparam.RuleStats)
	// BreakerOpen reports whether calls to the shared store are suspended after failures; it is
	// called at scrape time. Nil means there is no shared store (the gauge reads 0).
	BreakerOpen func() bool
	// NoRuntime leaves out the Go runtime and process collectors.
	NoRuntime bool
}

// Metrics holds the service's collectors and the registry they are registered on. It is safe for
// concurrent use. Its methods are cheap enough for the request path: label values are resolved
// against a map held in an atomic pointer, and no lock is taken.
type Metrics struct {
	registry *prometheus.Registry

	// resources are the resources named by the rules in force; others are counted as Other.
	resources atomic.Pointer[map[string]struct{}]

	// domains are the domains seen so far (at most MaxDomains), read without a lock; mu
	// serialises adding one (copy on write).
	mu      sync.Mutex
	domains atomic.Pointer[map[string]struct{}]

	decisions     *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	queueWait     prometheus.Histogram
	reloads       *prometheus.CounterVec
	rulesVersion  prometheus.Gauge
	rulesCount    prometheus.Gauge
	lastReloadOK  prometheus.Gauge
	logsDropped   prometheus.Counter
	redisCalls    *prometheus.CounterVec
	redisLatency  prometheus.Histogram
	redisFallback *prometheus.CounterVec
	redisBreaker  prometheus.GaugeFunc
}

// New builds Metrics with a fresh registry.
func New(opts Options) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_decisions_total",
			Help: "Decisions by API (ext_authz, ratelimit), rate-limit domain, resource (\"\" when no rule applied, \"other\" for one no rule names) and result.",
		}, []string{"api", "domain", "resource", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "extauthz_decision_duration_seconds",
			Help:    "Time to answer one call, throttle waits included, by API.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"api"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "extauthz_queue_wait_seconds",
			Help:    "Time throttled requests were held before being let through.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_rule_reloads_total",
			Help: "Rule file loads by result (applied, failed).",
		}, []string{"result"}),
		rulesVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "extauthz_rules_version",
			Help: "Version of the rules in force.",
		}),
		rulesCount: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "extauthz_rules",
			Help: "Number of rules in force.",
		}),
		lastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "extauthz_rules_last_load_success",
			Help: "1 when the last load of the rules file was applied, 0 when it was rejected.",
		}),
		logsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "extauthz_log_entries_dropped_total",
			Help: "Log entries dropped by sampling.",
		}),
		redisCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_redis_calls_total",
			Help: "Calls to the shared store by result (ok, error).",
		}, []string{"result"}),
		redisLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "extauthz_redis_call_duration_seconds",
			Help:    "Round-trip time of calls to the shared store.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
		redisFallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_redis_fallbacks_total",
			Help: "Checks answered by the fallback policy (local, allow, deny) because the shared store failed.",
		}, []string{"policy"}),
		redisBreaker: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "extauthz_redis_breaker_open",
			Help: "1 while calls to the shared store are suspended after failures.",
		}, func() float64 {
			if opts.BreakerOpen != nil && opts.BreakerOpen() {
				return 1
			}
			return 0
		}),
	}
	noResources, noDomains := map[string]struct{}{}, map[string]struct{}{}
	m.resources.Store(&noResources)
	m.domains.Store(&noDomains)
	m.lastReloadOK.Set(1)

	m.registry.MustRegister(m.decisions, m.latency, m.queueWait, m.reloads, m.rulesVersion,
		m.rulesCount, m.lastReloadOK, m.logsDropped, m.redisCalls, m.redisLatency,
		m.redisFallback, m.redisBreaker)
	if opts.RuleStats != nil {
		m.registry.MustRegister(newRuleCollector(opts.RuleStats))
	}
	if !opts.NoRuntime {
		m.registry.MustRegister(collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry returns the registry every collector of m is registered on.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// SetResources sets the resources named by the rules in force; decisions for any other resource
// are counted under Other.
func (m *Metrics) SetResources(resources []string) {
	set := make(map[string]struct{}, len(resources))
	for _, r := range resources {
		set[r] = struct{}{}
	}
	m.resources.Store(&set)
}

func (m *Metrics) resourceLabel(resource string) string {
	if resource == "" {
		return "" // no rule applied
	}
	if _, ok := (*m.resources.Load())[resource]; ok {
		return resource
	}
	return Other
}

func (m *Metrics) domainLabel(domain string) string {
	if domain == "" {
		return ""
	}
	seen := *m.domains.Load()
	if _, ok := seen[domain]; ok {
		return domain
	}
	if len(seen) >= MaxDomains {
		return Other
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen = *m.domains.Load()
	if _, ok := seen[domain]; ok {
		return domain
	}
	if len(seen) >= MaxDomains {
		return Other
	}
	next := make(map[string]struct{}, len(seen)+1)
	for d := range seen {
		next[d] = struct{}{}
	}
	next[domain] = struct{}{}
	m.domains.Store(&next)
	return domain
}

// Decision records one answer of api (ext_authz or ratelimit) for resource, with its result and
// the time it took. domain is the rate-limit domain ("" for ext_authz); resource is "" when no
// rule applied, and counted as Other when the rules in force do not name it.
func (m *Metrics) Decision(api, domain, resource, result string, latency time.Duration) {
	// GetMetricWithLabelValues rather than WithLabelValues: a label value that is not valid
	// UTF-8 is an error to drop, never a panic on the request path.
	if c, err := m.decisions.GetMetricWithLabelValues(api, m.domainLabel(domain), m.resourceLabel(resource), result); err == nil {
		c.Inc()
	}
	if h, err := m.latency.GetMetricWithLabelValues(api); err == nil {
		h.Observe(latency.Seconds())
	}
}

// QueueWait records how long a throttled request was held.
func (m *Metrics) QueueWait(d time.Duration) {
	m.queueWait.Observe(d.Seconds())
}

// Reload records one load of the rules file: applied or rejected, and the version and number
// of rules in force after it.
func (m *Metrics) Reload(applied bool, version uint64, rules int) {
	if applied {
		m.reloads.WithLabelValues("applied").Inc()
		m.lastReloadOK.Set(1)
	} else {
		m.reloads.WithLabelValues("failed").Inc()
		m.lastReloadOK.Set(0)
	}
	m.rulesVersion.Set(float64(version))
	m.rulesCount.Set(float64(rules))
}

// LogDropped records one log entry dropped by sampling.
func (m *Metrics) LogDropped() { m.logsDropped.Inc() }

// RedisCall records one call to the shared store: its round-trip time, and whether it failed.
func (m *Metrics) RedisCall(latency time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.redisCalls.WithLabelValues(result).Inc()
	m.redisLatency.Observe(latency.Seconds())
}

// RedisFallback records one check answered by the fallback policy ("local", "allow" or "deny").
func (m *Metrics) RedisFallback(policy string) {
	if c, err := m.redisFallback.GetMetricWithLabelValues(policy); err == nil {
		c.Inc()
	}
}

// ruleCollector reads the hot-param counters at scrape time.
type ruleCollector struct {
	stats     func() ([]hotparam.Rule, []hotparam.RuleStats)
	tracked   *prometheus.Desc
	evictions *prometheus.Desc
}

func newRuleCollector(stats func() ([]hotparam.Rule, []hotparam.RuleStats)) *ruleCollector {
	labels := []string{"rule", "resource", "param"}
	return &ruleCollector{
		stats: stats,
		tracked: prometheus.NewDesc("extauthz_hotparam_tracked_values",
			"Distinct values tracked now by a hot-param rule.", labels, nil),
		evictions: prometheus.NewDesc("extauthz_hotparam_evictions_total",
			"Values a hot-param rule evicted to stay within its capacity (since the rule's state was created).", labels, nil),
	}
}

func (c *ruleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tracked
	ch <- c.evictions
}

func (c *ruleCollector) Collect(ch chan<- prometheus.Metric) {
	rules, stats := c.stats()
	for _, s := range stats {
		if s.Rule < 0 || s.Rule >= len(rules) {
			continue // stats of a rule we cannot name: skip rather than emit a bad label
		}
		r := rules[s.Rule]
		idx := strconv.Itoa(s.Rule)
		if m, err := prometheus.NewConstMetric(c.tracked, prometheus.GaugeValue, float64(s.Tracked), idx, r.Resource, r.Param); err == nil {
			ch <- m
		}
		if m, err := prometheus.NewConstMetric(c.evictions, prometheus.CounterValue, float64(s.Evictions), idx, r.Resource, r.Param); err == nil {
			ch <- m
		}
	}
}
