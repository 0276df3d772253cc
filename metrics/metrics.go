// Package metrics records the service's Prometheus metrics on a registry of its own, and the
// per-second decision counts of the last few minutes that the admin console shows.
//
// Series stay bounded whatever the number of rules: at most Options.MaxResources resources
// have a label value of their own in extauthz_decisions_total (the first to see traffic; a
// resource idle for a whole Window gives its label to the busiest resource without one), and
// at most Options.MaxRules hot-param rules have their own tracked-values and evictions series
// (those with the most evictions, then the most tracked values). Everything else is counted
// under the label value Other.
package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
)

// Other is the label value that stands for every resource not named by the rules in force or
// past the cap on resources, for hot-param rules past the cap on rules, and for domains past
// MaxDomains, so that neither callers nor a large rules file can grow the label sets without
// bound.
const Other = "other"

// MaxDomains is the most distinct rate-limit domains given a label value of their own.
const MaxDomains = 32

// Options configure Metrics.
type Options struct {
	// RuleStats, BreakerOpen, RedisCacheHits and RedisHeld are the initial Sources (see Watch).
	//
	// RuleStats returns the hot-param rules in force and their counters; it is called at scrape
	// time. Nil means no per-rule metrics.
	RuleStats func() ([]hotparam.Rule, []hotparam.RuleStats)
	// BreakerOpen reports whether calls to the shared store are suspended after failures; it is
	// called at scrape time. Nil means there is no shared store (the gauge reads 0).
	BreakerOpen func() bool
	// RedisCacheHits returns the calls to the shared store refused from its cache of blocked
	// values, without a round trip; it is called at scrape time. Nil means none (reads 0).
	RedisCacheHits func() uint64
	// RedisHeld returns the calls to the shared store that waited (at most 2ms) for the instant
	// their value's next token was sure to be back before they went; called at scrape time.
	// Nil means none (reads 0).
	RedisHeld func() uint64
	// NoRuntime leaves out the Go runtime and process collectors.
	NoRuntime bool
	// MaxResources is the most resources given a label value of their own in
	// extauthz_decisions_total and a ring of per-second counts (9.6 KB each) in Snapshot; 0
	// means DefaultMaxResources. The others are counted under Other.
	MaxResources int
	// MaxRules is the most hot-param rules given series of their own; 0 means
	// DefaultMaxRules. The others are summed under Other.
	MaxRules int
	// Now is the clock of the per-second counts; nil means time.Now.
	Now func() time.Time
}

// Metrics holds the service's collectors and the registry they are registered on. It is safe for
// concurrent use. Its methods are cheap enough for the request path: label values are resolved
// against maps held in atomic pointers, and the only lock taken is the one of the resource's
// ring of per-second counts (rarely, mu: to label one of the first resources seen, or a new
// domain).
type Metrics struct {
	registry     *prometheus.Registry
	now          func() time.Time
	maxResources int

	// none and other count, per second, the decisions no rule applied to and those of
	// resources without a label of their own.
	none, other ring

	// mu serialises changes to resources, labelled, nextRebalance and domains; all are read
	// without it.
	mu sync.Mutex
	// resources are the resources named by the rules in force (copy on write); labelled is
	// how many of them have a ring, at most maxResources.
	resources     atomic.Pointer[table]
	labelled      atomic.Int64
	nextRebalance time.Time
	// domains are the domains seen so far (at most MaxDomains), copy on write.
	domains atomic.Pointer[map[string]struct{}]

	decisions     *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	queueWait     prometheus.Histogram
	reloads       *prometheus.CounterVec
	rulesVersion  prometheus.Gauge
	rulesCount    prometheus.Gauge
	lastReloadOK  prometheus.Gauge
	redisCalls    *prometheus.CounterVec
	redisLatency  prometheus.Histogram
	redisFallback *prometheus.CounterVec
	redisBreaker  prometheus.GaugeFunc
	redisCached   prometheus.CounterFunc
	redisHeld     prometheus.CounterFunc
	redisBooked   []prometheus.Collector // one counter an outcome (booked, given, back, lost)
	queueWaiting  prometheus.GaugeFunc
	logSuppressed prometheus.Counter
	unenforced    prometheus.Counter
	sources       atomic.Pointer[Sources] // read at scrape time; see Watch
}

// New builds Metrics with a fresh registry.
func New(opts Options) *Metrics {
	if opts.MaxResources <= 0 {
		opts.MaxResources = DefaultMaxResources
	}
	if opts.MaxRules <= 0 {
		opts.MaxRules = DefaultMaxRules
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var m *Metrics // the gauge funcs below read its sources at scrape time
	// sourceCounter is a counter read at scrape time from the source pick returns (0 when nil)
	sourceCounter := func(name, help string, pick func(*Sources) func() uint64) prometheus.CounterFunc {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if f := pick(m.source()); f != nil {
				return float64(f())
			}
			return 0
		})
	}
	m = &Metrics{
		registry:     prometheus.NewRegistry(),
		now:          opts.Now,
		maxResources: opts.MaxResources,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "extauthz_decisions_total",
			Help: "Decisions by API (ext_authz, ratelimit), rate-limit domain, resource (\"\" when no rule names it, \"other\" for one no rule names or past the cap on resources) and result.",
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
			if f := m.source().BreakerOpen; f != nil && f() {
				return 1
			}
			return 0
		}),
		redisCached: sourceCounter("extauthz_redis_blocked_cache_hits_total",
			"Calls to the shared store refused from the cache of values Redis blocked, without a round trip.",
			func(s *Sources) func() uint64 { return s.RedisCacheHits }),
		redisHeld: sourceCounter("extauthz_redis_held_total",
			"Calls to the shared store that waited, at most 2ms, until their value's next token was sure to be back in Redis before they went.",
			func(s *Sources) func() uint64 { return s.RedisHeld }),
		redisBooked: bookedCounters(func() func() BookedTokens { return m.source().RedisBooked }),
		queueWaiting: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "extauthz_queue_waiting",
			Help: "Requests held in throttle queues now, all rules and both APIs together (decision.max_waiting caps it).",
		}, func() float64 {
			if f := m.source().Waiting; f != nil {
				return float64(f())
			}
			return 0
		}),
		logSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "extauthz_decision_log_suppressed_total",
			Help: "Decision log lines left out over decision_log.max_per_second (counted once their second is over).",
		}),
		unenforced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "extauthz_concurrency_unenforced_total",
			Help: "Times a concurrency rule's resource saw ext_authz Check calls and no rate-limit call for a minute: Check has no completion signal, so the rule limited nothing (counted once per such spell and resource).",
		}),
	}
	m.Watch(Sources{RuleStats: opts.RuleStats, BreakerOpen: opts.BreakerOpen, RedisCacheHits: opts.RedisCacheHits,
		RedisHeld: opts.RedisHeld})
	noResources, noDomains := table{}, map[string]struct{}{}
	m.resources.Store(&noResources)
	m.domains.Store(&noDomains)
	m.lastReloadOK.Set(1)
	m.zeroCounters()

	m.registry.MustRegister(m.decisions, m.latency, m.queueWait, m.reloads, m.rulesVersion,
		m.rulesCount, m.lastReloadOK, m.redisCalls, m.redisLatency,
		m.redisFallback, m.redisBreaker, m.redisCached, m.redisHeld, m.queueWaiting, m.logSuppressed, m.unenforced)
	m.registry.MustRegister(m.redisBooked...)
	m.registry.MustRegister(rebalancer{m: m, hidden: prometheus.NewDesc("extauthz_resources_aggregated",
		"Resources named by the rules in force whose decisions are counted under resource=\"other\" because of the cap on resources.", nil, nil)})
	m.registry.MustRegister(newRuleCollector(m.ruleStats, opts.MaxRules))
	if !opts.NoRuntime {
		m.registry.MustRegister(collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Sources are what m reads from the service at scrape time. A nil func reads as nothing: no
// per-rule series, the breaker closed, no cache hits, no request waiting.
type Sources struct {
	RuleStats      func() ([]hotparam.Rule, []hotparam.RuleStats)
	BreakerOpen    func() bool // nil: no shared store
	RedisCacheHits func() uint64
	RedisHeld      func() uint64
	// RedisBooked returns the tokens the shared store booked ahead, gave out of its bookings,
	// gave back and lost (store.redis.book_ahead).
	RedisBooked func() BookedTokens
	Waiting     func() int // requests held in throttle queues now
}

// BookedTokens are the counts of tokens booked ahead by the shared store: booked, given out of
// bookings without a call, given back unused, and lost (they could not be given back).
type BookedTokens struct{ Booked, Given, Back, Lost uint64 }

// bookedCounters returns extauthz_redis_booked_tokens_total, one counter an outcome, reading
// source's func at scrape time (none reads 0).
func bookedCounters(source func() func() BookedTokens) []prometheus.Collector {
	read := func(pick func(BookedTokens) uint64) func() float64 {
		return func() float64 {
			if f := source(); f != nil {
				return float64(pick(f()))
			}
			return 0
		}
	}
	help := "Tokens of values over their limits booked ahead from the shared store (store.redis.book_ahead) by outcome: booked, given (to a call, without a round trip), back (given back unused), lost (could not be given back)."
	var cs []prometheus.Collector
	for _, o := range []struct {
		name string
		pick func(BookedTokens) uint64
	}{
		{"booked", func(b BookedTokens) uint64 { return b.Booked }},
		{"given", func(b BookedTokens) uint64 { return b.Given }},
		{"back", func(b BookedTokens) uint64 { return b.Back }},
		{"lost", func(b BookedTokens) uint64 { return b.Lost }},
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "extauthz_redis_booked_tokens_total", Help: help,
			ConstLabels: prometheus.Labels{"outcome": o.name}}, read(o.pick)))
	}
	return cs
}

// Watch makes m read src at scrape time from now on. The service builds its metrics first (the
// rules store and the shared store report to them) and gives them the stores to read once
// those are built.
func (m *Metrics) Watch(src Sources) { m.sources.Store(&src) }

func (m *Metrics) source() *Sources { return m.sources.Load() }

// ruleStats reads the rules' counters from the sources; none when there is no source.
func (m *Metrics) ruleStats() ([]hotparam.Rule, []hotparam.RuleStats) {
	if f := m.source().RuleStats; f != nil {
		return f()
	}
	return nil, nil
}

// Registry returns the registry every collector of m is registered on.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

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

// Decision records one answer of api (ext_authz or ratelimit) for resource, with its outcome
// (counted under outcome.Label()) and the time it took, and counts it in the resource's
// per-second counts. domain is the rate-limit domain ("" for ext_authz); resource is "" when
// no rule applied, and counted as Other when the rules in force do not name it or it is past
// the cap on resources. Decision implements policy.Recorder.
func (m *Metrics) Decision(api, domain, resource string, outcome policy.Outcome, latency time.Duration) {
	label := m.label(resource, kindOf(outcome))
	// GetMetricWithLabelValues rather than WithLabelValues: a label value that is not valid
	// UTF-8 is an error to drop, never a panic on the request path.
	if c, err := m.decisions.GetMetricWithLabelValues(api, m.domainLabel(domain), label, outcome.Label()); err == nil {
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

// DecisionLogSuppressed records n decision log lines left out over the cap on lines a second.
func (m *Metrics) DecisionLogSuppressed(n uint64) { m.logSuppressed.Add(float64(n)) }

// ConcurrencyUnenforced counts a concurrency rule that only Check calls reached for idle
// (policy.UnenforcedRecorder).
func (m *Metrics) ConcurrencyUnenforced(resource string, rule int, idle time.Duration) {
	m.unenforced.Inc()
}

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
