package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
)

// clock is a settable clock for Options.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// manyRules returns n hot-param rules on n resources, and their stats.
func manyRules(n int) ([]string, []hotparam.Rule, []hotparam.RuleStats) {
	names := make([]string, n)
	rules := make([]hotparam.Rule, n)
	stats := make([]hotparam.RuleStats, n)
	for i := range n {
		names[i] = fmt.Sprintf("POST:/api/v1/tenants/%06d/orders", i)
		rules[i] = hotparam.Rule{Resource: names[i], Param: "item_id"}
		stats[i] = hotparam.RuleStats{Rule: i, Tracked: i % 1000, Evictions: uint64(i % 7)}
	}
	return names, rules, stats
}

// scrape serves m's registry over loopback HTTP, as the admin listener does, and returns the
// body of one GET /metrics.
func scrape(t testing.TB, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d: %s", resp.StatusCode, body)
	}
	return string(body)
}

// TestScrapeBoundedWith100kRules: 100,000 rules on 100,000 resources, every one of them with
// traffic on both APIs and two domains: the scrape stays under 1 MB, and no decision is lost
// (the series sum to what was recorded).
func TestScrapeBoundedWith100kRules(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 rules: not in -short")
	}
	const n = 100_000
	names, rules, stats := manyRules(n)
	m := New(Options{RuleStats: func() ([]hotparam.Rule, []hotparam.RuleStats) { return rules, stats }})
	m.SetResources(names)
	results := []policy.Outcome{policy.Allowed, policy.ParamFlow, policy.Authority}
	recorded := 0
	for i, name := range names {
		m.Decision("ratelimit", []string{"edge", "internal"}[i%2], name, results[i%3], time.Millisecond)
		m.Decision("ext_authz", "", name, results[(i+1)%3], time.Millisecond)
		recorded += 2
	}

	body := scrape(t, m)
	if got, limit := len(body), 1<<20; got > limit {
		t.Errorf("scrape with %d rules = %d bytes, want <= %d", n, got, limit)
	}
	t.Logf("scrape with %d rules: %d bytes", n, len(body))

	if got, want := series(t, m, "extauthz_decisions_total"), DefaultMaxResources*2+2*3*2; got > want {
		t.Errorf("decision series = %d, want <= %d", got, want)
	}
	var sum float64
	each(m.decisions, func(_ map[string]string, v float64) { sum += v })
	if sum != float64(recorded) {
		t.Errorf("decisions summed over series = %v, want %d", sum, recorded)
	}
	if got, want := series(t, m, "extauthz_hotparam_tracked_values"), DefaultMaxRules+1; got != want {
		t.Errorf("tracked-values series = %d, want %d", got, want)
	}
	for _, tt := range []struct {
		name string
		want float64
	}{
		{"extauthz_resources_aggregated", n - DefaultMaxResources},
		{"extauthz_hotparam_rules_aggregated", n - DefaultMaxRules},
	} {
		if got := counter(t, m, tt.name, nil); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestResourceCapHandsIdleLabels(t *testing.T) {
	clk := newClock(t0)
	m := New(Options{NoRuntime: true, MaxResources: 2, Now: clk.now})
	m.SetResources([]string{"a", "b", "c"})
	ok := map[string]string{"result": "ok"}
	with := func(resource string) map[string]string {
		return map[string]string{"resource": resource, "result": "ok"}
	}

	m.Decision("ext_authz", "", "a", policy.Allowed, 0)
	m.Decision("ext_authz", "", "b", policy.Allowed, 0)
	m.Decision("ext_authz", "", "c", policy.Allowed, 0) // past the cap
	m.Decision("ext_authz", "", "c", policy.Allowed, 0)
	if got := counter(t, m, "extauthz_decisions_total", with(Other)); got != 2 {
		t.Errorf("other = %v, want 2 (c past the cap)", got)
	}

	// b stays busy, a goes idle for a whole Window: at the next scrape c takes a's label.
	clk.add(Window - time.Second)
	m.Decision("ext_authz", "", "b", policy.Allowed, 0)
	m.Decision("ext_authz", "", "c", policy.Allowed, 0)
	clk.add(2 * time.Second)
	m.Decision("ext_authz", "", "c", policy.Allowed, 0)
	if got, want := counter(t, m, "extauthz_resources_aggregated", nil), 1.0; got != want {
		t.Errorf("aggregated = %v, want %v", got, want)
	}
	if find(t, m, "extauthz_decisions_total", with("a")) != nil {
		t.Error("the idle resource a kept its series")
	}
	m.Decision("ext_authz", "", "c", policy.Allowed, 0)
	m.Decision("ext_authz", "", "a", policy.Allowed, 0) // a now goes to Other
	tests := []struct {
		resource string
		want     float64
	}{
		{"b", 2},
		{"c", 1},   // counted from the moment it got its label
		{Other, 5}, // c's four before, a's one after: never decreasing
	}
	for _, tt := range tests {
		if got := counter(t, m, "extauthz_decisions_total", with(tt.resource)); got != tt.want {
			t.Errorf("decisions{resource=%q} = %v, want %v", tt.resource, got, tt.want)
		}
	}
	var sum float64
	each(m.decisions, func(l map[string]string, v float64) {
		if l["result"] == ok["result"] {
			sum += v
		}
	})
	if sum != 8 {
		t.Errorf("sum over series = %v, want 8", sum)
	}

	// A reload that drops c deletes its series and frees its label for the next resource.
	m.SetResources([]string{"a", "b"})
	if find(t, m, "extauthz_decisions_total", with("c")) != nil {
		t.Error("a resource dropped by a reload kept its series")
	}
	m.Decision("ext_authz", "", "a", policy.Allowed, 0)
	if got := counter(t, m, "extauthz_decisions_total", with("a")); got != 1 {
		t.Errorf("a after the reload freed a label = %v, want 1", got)
	}
}

func TestRuleCap(t *testing.T) {
	rules := []hotparam.Rule{
		{Resource: "r0", Param: "p"}, {Resource: "r1", Param: "p"},
		{Resource: "r2", Param: "p"}, {Resource: "r3", Param: "p"},
	}
	stats := []hotparam.RuleStats{
		{Rule: 0, Tracked: 10},
		{Rule: 1, Tracked: 1, Evictions: 5},
		{Rule: 2, Tracked: 50},
		{Rule: 3, Tracked: 3, Evictions: 1},
	}
	m := New(Options{NoRuntime: true, MaxRules: 2, RuleStats: func() ([]hotparam.Rule, []hotparam.RuleStats) {
		return rules, stats
	}})
	tests := []struct {
		name, rule string
		want       float64
	}{
		{"extauthz_hotparam_evictions_total", "1", 5},
		{"extauthz_hotparam_evictions_total", "3", 1},
		{"extauthz_hotparam_tracked_values", Other, 60},
		{"extauthz_hotparam_evictions_total", Other, 0},
	}
	for _, tt := range tests {
		if got := counter(t, m, tt.name, map[string]string{"rule": tt.rule}); got != tt.want {
			t.Errorf("%s{rule=%q} = %v, want %v", tt.name, tt.rule, got, tt.want)
		}
	}
	if got := series(t, m, "extauthz_hotparam_tracked_values"); got != 3 {
		t.Errorf("series = %d, want 3", got)
	}
	if got := counter(t, m, "extauthz_hotparam_rules_aggregated", nil); got != 2 {
		t.Errorf("aggregated = %v, want 2", got)
	}
	if stats[0].Rule != 0 || stats[2].Rule != 2 {
		t.Error("the collector reordered the caller's stats")
	}
}

func TestSnapshot(t *testing.T) {
	clk := newClock(t0.Add(500 * time.Millisecond))
	open := false
	m := New(Options{NoRuntime: true, Now: clk.now, BreakerOpen: func() bool { return open }})
	m.SetResources([]string{"GET:/a"})
	for _, r := range []policy.Outcome{policy.Allowed, policy.Allowed, policy.Allowed, policy.ParamFlow, policy.Shadow} {
		m.Decision("ratelimit", "edge", "GET:/a", r, 0)
	}
	m.Decision("ext_authz", "", "GET:/nameless", policy.Allowed, 0)
	clk.add(2 * time.Second)
	m.Decision("ext_authz", "", "GET:/a", policy.Authority, 0)
	m.Decision("ext_authz", "", "GET:/a", policy.Invalid, 0)
	m.Decision("ext_authz", "", "GET:/a", policy.Cancelled, 0)
	m.RedisCall(0, nil)
	m.RedisCall(0, io.EOF)
	m.RedisFallback("local")

	s := m.Snapshot(clk.now())
	if got, want := len(s.Resources), 2; got != want {
		t.Fatalf("resources = %d (%+v), want %d", got, s.Resources, want)
	}
	a := s.Resources[0]
	last := int(windowSeconds) - 1
	for _, tt := range []struct {
		what      string
		got, want uint32
	}{
		{"allowed 2s ago", a.Allowed[last-2], 4},
		{"blocked 2s ago", a.Blocked[last-2], 1},
		{"allowed 1s ago", a.Allowed[last-1], 0},
		{"allowed now", a.Allowed[last], 0},
		{"blocked now", a.Blocked[last], 2},
	} {
		if tt.got != tt.want {
			t.Errorf("GET:/a %s = %d, want %d", tt.what, tt.got, tt.want)
		}
	}
	if want := (Totals{OK: 3, Shadow: 1, ParamFlow: 1, Authority: 1, Invalid: 1, Other: 1}); a.Totals != want {
		t.Errorf("totals = %+v, want %+v", a.Totals, want)
	}
	if got := s.Resources[1]; got.Resource != Other || got.Totals.OK != 1 {
		t.Errorf("second row = %q %+v, want %q with one ok", got.Resource, got.Totals, Other)
	}
	wantStore := Store{Enabled: true, Calls: 2, Errors: 1, Fallbacks: map[string]uint64{"local": 1}}
	if fmt.Sprint(s.Store) != fmt.Sprint(wantStore) {
		t.Errorf("store = %+v, want %+v", s.Store, wantStore)
	}

	// A Window later everything has rolled out.
	clk.add(Window)
	s = m.Snapshot(clk.now())
	if len(s.Resources) != 1 || s.Resources[0].Totals != (Totals{}) {
		t.Errorf("a Window later: %+v, want GET:/a alone with nothing counted", s.Resources)
	}
}

// TestConcurrentDecisionsAndScrapes runs decisions on many resources against scrapes and
// reloads, for the race detector and for the invariant that no decision is lost.
func TestConcurrentDecisionsAndScrapes(t *testing.T) {
	clk := newClock(t0)
	m := New(Options{NoRuntime: true, MaxResources: 4, Now: clk.now})
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	m.SetResources(names)
	const workers, perWorker = 4, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				m.Decision("ext_authz", "", names[(w+i)%len(names)], policy.Allowed, 0)
			}
		}()
	}
	stop := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			clk.add(Window) // every scrape sees idle resources and may hand labels on
			if _, err := m.Registry().Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-scraped
	if body := scrape(t, m); !strings.Contains(body, "extauthz_decisions_total") {
		t.Fatal("no decisions in the scrape")
	}
	if got := series(t, m, "extauthz_decisions_total"); got > 4+1 {
		t.Errorf("series = %d, want <= 5", got)
	}
}

// BenchmarkScrape100kRules scrapes a registry with 100,000 rules and resources while
// decisions keep arriving on other goroutines.
func BenchmarkScrape100kRules(b *testing.B) {
	names, rules, stats := manyRules(100_000)
	m := New(Options{RuleStats: func() ([]hotparam.Rule, []hotparam.RuleStats) { return rules, stats }})
	m.SetResources(names)
	for i, name := range names {
		m.Decision("ratelimit", "edge", name, []policy.Outcome{policy.Allowed, policy.ParamFlow}[i%2], time.Millisecond)
	}
	h := promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m.Decision("ratelimit", "edge", names[i%len(names)], policy.Allowed, time.Millisecond)
		}
	}()
	b.ReportAllocs()
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		size = rec.Body.Len()
	}
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(size), "bytes/scrape")
}

// TestSweepDeletesStraySeries: a decision that raced with an eviction can recreate the series
// of a resource without a label; the next rebalance deletes it, so the cap holds.
func TestSweepDeletesStraySeries(t *testing.T) {
	clk := newClock(t0)
	m := New(Options{NoRuntime: true, MaxResources: 1, Now: clk.now})
	m.SetResources([]string{"a", "b"})
	m.Decision("ext_authz", "", "a", policy.Allowed, 0) // a takes the one label
	// What the losing side of the race leaves: a series for b, which has no label. A scrape
	// (which runs the rebalance beside the other collectors) deletes it for the next ones.
	for range 2 {
		m.decisions.WithLabelValues("ext_authz", "", "b", "ok").Inc()
		if _, err := m.Registry().Gather(); err != nil {
			t.Fatal(err)
		}
		if got := find(t, m, "extauthz_decisions_total", map[string]string{"resource": "b"}); got != nil {
			t.Error("the stray series of b survived a rebalance")
		}
		clk.add(RebalanceEvery)
	}
	if find(t, m, "extauthz_decisions_total", map[string]string{"resource": "a"}) == nil {
		t.Error("the rebalance deleted a's series")
	}
}
