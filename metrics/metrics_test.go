package metrics

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
)

// find returns the metric of family name whose labels include want, or nil.
func find(t *testing.T, m *Metrics, name string, want map[string]string) *dto.Metric {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, metric := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range metric.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			return metric
		}
	}
	return nil
}

// series counts the series of family name.
func series(t *testing.T, m *Metrics, name string) int {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

func counter(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	metric := find(t, m, name, labels)
	if metric == nil {
		t.Fatalf("%s%v: not found", name, labels)
	}
	if c := metric.GetCounter(); c != nil {
		return c.GetValue()
	}
	return metric.GetGauge().GetValue()
}

func TestDecisionLabels(t *testing.T) {
	m := New(Options{NoRuntime: true})
	m.SetResources([]string{"GET:/hello", "POST:/order"})

	m.Decision("check", "", "GET:/hello", policy.Allowed, time.Millisecond)
	m.Decision("check", "", "GET:/hello", policy.Allowed, time.Millisecond)
	m.Decision("check", "", "GET:/hello", policy.Authority, time.Millisecond)
	m.Decision("ratelimit", "edge", "POST:/order", policy.ParamFlow, 2*time.Millisecond)
	// Resources not named by the rules share one label value.
	m.Decision("check", "", "GET:/random/1", policy.Allowed, time.Millisecond)
	m.Decision("check", "", "GET:/random/2", policy.Allowed, time.Millisecond)
	// No rule applied: its own label value.
	m.Decision("check", "", "", policy.Allowed, time.Millisecond)

	tests := []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"api": "check", "domain": "", "resource": "GET:/hello", "result": "ok"}, 2},
		{map[string]string{"api": "check", "domain": "", "resource": "GET:/hello", "result": "authority"}, 1},
		{map[string]string{"api": "ratelimit", "domain": "edge", "resource": "POST:/order", "result": "param_flow"}, 1},
		{map[string]string{"api": "check", "domain": "", "resource": Other, "result": "ok"}, 2},
		{map[string]string{"api": "check", "domain": "", "resource": "", "result": "ok"}, 1},
	}
	for _, tt := range tests {
		if got := counter(t, m, "extauthz_decisions_total", tt.labels); got != tt.want {
			t.Errorf("decisions%v = %v, want %v", tt.labels, got, tt.want)
		}
	}
	if got, want := series(t, m, "extauthz_decisions_total"), 5; got != want {
		t.Errorf("decision series = %d, want %d", got, want)
	}

	h := find(t, m, "extauthz_decision_duration_seconds", map[string]string{"api": "check"})
	if h == nil {
		t.Fatal("latency histogram for check not found")
	}
	if got, want := h.GetHistogram().GetSampleCount(), uint64(6); got != want {
		t.Errorf("check latency samples = %d, want %d", got, want)
	}
	if got, want := h.GetHistogram().GetSampleSum(), 0.006; got < want-1e-12 || got > want+1e-12 {
		t.Errorf("check latency sum = %v, want %v", got, want)
	}

	// A reload that drops a resource sends it to Other from then on.
	m.SetResources([]string{"POST:/order"})
	m.Decision("check", "", "GET:/hello", policy.Allowed, time.Millisecond)
	if got, want := counter(t, m, "extauthz_decisions_total", map[string]string{"resource": Other, "result": "ok"}), 3.0; got != want {
		t.Errorf("other after reload = %v, want %v", got, want)
	}
}

func TestDomainsBounded(t *testing.T) {
	m := New(Options{NoRuntime: true})
	m.SetResources([]string{"r"})
	for i := 0; i < MaxDomains+10; i++ {
		m.Decision("ratelimit", fmt.Sprintf("d%d", i), "r", policy.Allowed, 0)
	}
	if got, want := counter(t, m, "extauthz_decisions_total", map[string]string{"domain": Other}), 10.0; got != want {
		t.Errorf("decisions in domain %q = %v, want %v", Other, got, want)
	}
	if got, want := series(t, m, "extauthz_decisions_total"), MaxDomains+1; got != want {
		t.Errorf("series = %d, want %d", got, want)
	}
	// A domain seen before the cap keeps its own label.
	m.Decision("ratelimit", "d0", "r", policy.Allowed, 0)
	if got, want := counter(t, m, "extauthz_decisions_total", map[string]string{"domain": "d0"}), 2.0; got != want {
		t.Errorf("decisions in d0 = %v, want %v", got, want)
	}
}

func TestDomainsBoundedConcurrently(t *testing.T) {
	m := New(Options{NoRuntime: true})
	m.SetResources([]string{"r"})
	const workers, each = 8, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m.Decision("ratelimit", fmt.Sprintf("w%d-d%d", w, i), "r", policy.Allowed, 0)
			}
		}()
	}
	wg.Wait()
	if got, want := series(t, m, "extauthz_decisions_total"), MaxDomains+1; got != want {
		t.Errorf("series = %d, want %d", got, want)
	}
	if got, want := counter(t, m, "extauthz_decisions_total", map[string]string{"domain": Other}), float64(workers*each-MaxDomains); got != want {
		t.Errorf("decisions in %q = %v, want %v", Other, got, want)
	}
}

func TestInvalidLabelDropped(t *testing.T) {
	m := New(Options{NoRuntime: true})
	bad := string([]byte{0xff, 0xfe})
	m.SetResources([]string{bad})
	m.Decision("check", bad, bad, policy.Allowed, 0) // must not panic
	if got := series(t, m, "extauthz_decisions_total"); got != 0 {
		t.Errorf("series = %d, want 0", got)
	}
}

func TestQueueWaitAndReloads(t *testing.T) {
	m := New(Options{NoRuntime: true})
	m.QueueWait(250 * time.Millisecond)
	m.QueueWait(750 * time.Millisecond)
	h := find(t, m, "extauthz_queue_wait_seconds", nil)
	if h == nil {
		t.Fatal("queue wait histogram not found")
	}
	if got, want := h.GetHistogram().GetSampleCount(), uint64(2); got != want {
		t.Errorf("queue waits = %d, want %d", got, want)
	}
	if got, want := h.GetHistogram().GetSampleSum(), 1.0; got != want {
		t.Errorf("queue wait sum = %v, want %v", got, want)
	}

	m.Reload(true, 1, 3)
	m.Reload(false, 1, 3)
	m.Reload(false, 1, 3)
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"extauthz_rule_reloads_total", map[string]string{"result": "applied"}, 1},
		{"extauthz_rule_reloads_total", map[string]string{"result": "failed"}, 2},
		{"extauthz_rules_version", nil, 1},
		{"extauthz_rules", nil, 3},
		{"extauthz_rules_last_load_success", nil, 0},
	}
	for _, tt := range tests {
		if got := counter(t, m, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	m.Reload(true, 2, 4)
	if got := counter(t, m, "extauthz_rules_last_load_success", nil); got != 1 {
		t.Errorf("last load success after an applied load = %v, want 1", got)
	}
}

func TestRuleCollector(t *testing.T) {
	rules := []hotparam.Rule{
		{Resource: "POST:/order", Param: "item_id"},
		{Resource: "GET:/user", Param: "uid"},
	}
	stats := []hotparam.RuleStats{
		{Rule: 0, Tracked: 42, Evictions: 7},
		{Rule: 1, Tracked: 3, Evictions: 0},
		{Rule: 9, Tracked: 1}, // no such rule: skipped
	}
	calls := 0
	m := New(Options{NoRuntime: true, RuleStats: func() ([]hotparam.Rule, []hotparam.RuleStats) {
		calls++
		return rules, stats
	}})

	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"extauthz_hotparam_tracked_values", map[string]string{"rule": "0", "resource": "POST:/order", "param": "item_id"}, 42},
		{"extauthz_hotparam_evictions_total", map[string]string{"rule": "0", "resource": "POST:/order", "param": "item_id"}, 7},
		{"extauthz_hotparam_tracked_values", map[string]string{"rule": "1", "resource": "GET:/user", "param": "uid"}, 3},
	}
	for _, tt := range tests {
		if got := counter(t, m, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if find(t, m, "extauthz_hotparam_tracked_values", map[string]string{"rule": "9"}) != nil {
		t.Error("stats of an unknown rule were exported")
	}
	if calls == 0 {
		t.Error("RuleStats was never called at scrape time")
	}

	// The values are read at scrape time, not at registration.
	stats[0].Tracked = 5
	if got := counter(t, m, "extauthz_hotparam_tracked_values", map[string]string{"rule": "0"}); got != 5 {
		t.Errorf("tracked after change = %v, want 5", got)
	}
}

func TestRedisHooks(t *testing.T) {
	open := true
	m := New(Options{NoRuntime: true, BreakerOpen: func() bool { return open }, RedisCacheHits: func() uint64 { return 7 },
		RedisHeld: func() uint64 { return 3 }})
	m.RedisCall(time.Millisecond, nil)
	m.RedisCall(2*time.Millisecond, errors.New("timeout"))
	m.RedisCall(time.Millisecond, errors.New("timeout"))
	m.RedisFallback("local")
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"extauthz_redis_calls_total", map[string]string{"result": "ok"}, 1},
		{"extauthz_redis_calls_total", map[string]string{"result": "error"}, 2},
		{"extauthz_redis_fallbacks_total", map[string]string{"policy": "local"}, 1},
		{"extauthz_redis_breaker_open", nil, 1},
		{"extauthz_redis_blocked_cache_hits_total", nil, 7},
		{"extauthz_redis_held_total", nil, 3},
	}
	for _, tt := range tests {
		if got := counter(t, m, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	open = false
	if got := counter(t, m, "extauthz_redis_breaker_open", nil); got != 0 {
		t.Errorf("breaker after close = %v, want 0", got)
	}
}

// extauthz_queue_waiting reads the requests held now at each scrape; without a source it is 0.
func TestQueueWaiting(t *testing.T) {
	m := New(Options{NoRuntime: true})
	if got := counter(t, m, "extauthz_queue_waiting", nil); got != 0 {
		t.Errorf("waiting without a source = %v, want 0", got)
	}
	held := 3
	m.Watch(Sources{Waiting: func() int { return held }})
	if got := counter(t, m, "extauthz_queue_waiting", nil); got != 3 {
		t.Errorf("waiting = %v, want 3", got)
	}
	held = 0
	if got := counter(t, m, "extauthz_queue_waiting", nil); got != 0 {
		t.Errorf("waiting once released = %v, want 0", got)
	}
}

func TestNoBreaker(t *testing.T) {
	m := New(Options{NoRuntime: true})
	if got := counter(t, m, "extauthz_redis_breaker_open", nil); got != 0 {
		t.Errorf("breaker without a store = %v, want 0", got)
	}
	if got := counter(t, m, "extauthz_redis_blocked_cache_hits_total", nil); got != 0 {
		t.Errorf("blocked-cache hits without a store = %v, want 0", got)
	}
	if got := counter(t, m, "extauthz_redis_held_total", nil); got != 0 {
		t.Errorf("held calls without a store = %v, want 0", got)
	}
	if got := counter(t, m, "extauthz_redis_booked_tokens_total", map[string]string{"outcome": "given"}); got != 0 {
		t.Errorf("booked tokens given without a store = %v, want 0", got)
	}
}

// extauthz_redis_booked_tokens_total reads the store's counts at scrape time, one an outcome.
func TestBookedTokens(t *testing.T) {
	m := New(Options{NoRuntime: true})
	b := BookedTokens{Booked: 40, Given: 31, Back: 6, Lost: 2}
	m.Watch(Sources{RedisBooked: func() BookedTokens { return b }})
	for outcome, want := range map[string]float64{"booked": 40, "given": 31, "back": 6, "lost": 2} {
		if got := counter(t, m, "extauthz_redis_booked_tokens_total", map[string]string{"outcome": outcome}); got != want {
			t.Errorf("outcome %s = %v, want %v", outcome, got, want)
		}
	}
	b.Given = 39
	if got := counter(t, m, "extauthz_redis_booked_tokens_total", map[string]string{"outcome": "given"}); got != 39 {
		t.Errorf("given after change = %v, want 39", got)
	}
}

func TestRuntimeCollectors(t *testing.T) {
	m := New(Options{})
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	joined := strings.Join(names, " ")
	if !strings.Contains(joined, "go_goroutines") {
		t.Errorf("runtime metrics missing; have %s", joined)
	}
}

func BenchmarkDecisionSerial(b *testing.B) {
	m := New(Options{NoRuntime: true})
	m.SetResources([]string{"GET:/hello"})
	b.ReportAllocs()
	for b.Loop() {
		m.Decision("ratelimit", "edge", "GET:/hello", policy.Allowed, time.Millisecond)
	}
}

func BenchmarkDecision(b *testing.B) {
	m := New(Options{NoRuntime: true})
	m.SetResources([]string{"GET:/hello"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Decision("ratelimit", "edge", "GET:/hello", policy.Allowed, time.Millisecond)
		}
	})
}
