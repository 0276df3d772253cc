package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/rulestore"
)

const consoleRules = `
authority:
  - resource: "GET:/items"
    strategy: white
    origins: [web]
param_flow:
  - resource: "GET:/items"
    param: item_id
    grade: qps
    count: 2
    duration: 1s
  - resource: "GET:/items"
    param: query
    grade: qps
    count: 1
    duration: 1s
    shadow: true
  - resource: "POST:/orders"
    param: api_key
    grade: qps
    count: 1
    duration: 1s
`

// consoleFixture is a real rules store, limiter and metrics on a fixed clock.
type consoleFixture struct {
	now   time.Time
	store *rulestore.Store
	m     *metrics.Metrics
	h     http.Handler
}

func newConsoleFixture(t *testing.T, redact func(param, value string) string) *consoleFixture {
	t.Helper()
	f := &consoleFixture{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(consoleRules), 0o644); err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return f.now }
	store, err := rulestore.New(rulestore.Options{File: file, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	f.store = store
	f.m = metrics.New(metrics.Options{NoRuntime: true, Now: clock})
	f.m.SetResources([]string{"GET:/items", "POST:/orders"})
	f.h = New(Options{
		Rules:     store.Current,
		LastError: store.LastError,
		Top:       func(n int) []hotparam.RuleTop { return store.Current().ParamFlow.Top(f.now, n) },
		Traffic:   f.m.Snapshot,
		Redact:    redact,
		Now:       clock,
	})
	return f
}

// request runs one request through the limiter and records it as envoyapi does.
func (f *consoleFixture) request(t *testing.T, resource string, params map[string]string) bool {
	t.Helper()
	e := hotparam.Entry{Resource: resource}
	for k, v := range params {
		e.Params = append(e.Params, hotparam.Param{Name: k, Values: []string{v}})
	}
	d := f.store.Current().ParamFlow.Check(context.Background(), f.now, []hotparam.Entry{e}, hotparam.CheckOptions{}, nil)
	result := policy.Allowed
	switch {
	case !d.Allowed:
		result = policy.ParamFlow
	case d.ShadowBlocked:
		result = policy.Shadow
	}
	f.m.Decision("ratelimit", "edge", resource, result, 0)
	return d.Allowed
}

func (f *consoleFixture) data(t *testing.T) Console {
	t.Helper()
	code, ctype, body := get(t, f.h, "/console/data")
	if code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("GET /console/data = %d %s: %s", code, ctype, body)
	}
	var c Console
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatalf("decode /console/data: %v\n%s", err, body)
	}
	return c
}

func TestConsoleData(t *testing.T) {
	f := newConsoleFixture(t, nil)
	// Three on item a: two pass, the third is blocked by rule 0; query q passes rule 0 on b
	// but the shadow rule 1 would block its second use.
	for _, want := range []bool{true, true, false} {
		if got := f.request(t, "GET:/items", map[string]string{"item_id": "a"}); got != want {
			t.Fatalf("item a: allowed = %v, want %v", got, want)
		}
	}
	f.request(t, "GET:/items", map[string]string{"item_id": "b", "query": "q"})
	f.request(t, "GET:/items", map[string]string{"item_id": "c", "query": "q"})
	f.m.Decision("ext_authz", "", "GET:/items", policy.Authority, 0)
	f.now = f.now.Add(time.Second)

	c := f.data(t)
	if c.WindowSeconds != 300 || !c.Time.Equal(f.now) {
		t.Errorf("window, time = %d, %v; want 300, %v", c.WindowSeconds, c.Time, f.now)
	}
	if got, want := len(c.Resources), 2; got != want {
		t.Fatalf("resources = %d (%+v), want %d", got, c.Resources, want)
	}
	items, orders := c.Resources[0], c.Resources[1]
	if items.Resource != "GET:/items" || orders.Resource != "POST:/orders" {
		t.Fatalf("resources = %q, %q; want GET:/items, POST:/orders", items.Resource, orders.Resource)
	}
	wantTotals := metrics.Totals{OK: 3, Shadow: 1, ParamFlow: 1, Authority: 1}
	if items.Totals == nil || *items.Totals != wantTotals {
		t.Errorf("GET:/items totals = %+v, want %+v", items.Totals, wantTotals)
	}
	if got, want := items.Allowed[len(items.Allowed)-2], uint32(4); got != want {
		t.Errorf("GET:/items allowed a second ago = %d, want %d", got, want)
	}
	if got, want := items.Blocked[len(items.Blocked)-2], uint32(2); got != want {
		t.Errorf("GET:/items blocked a second ago = %d, want %d", got, want)
	}
	wantRules := []RuleRef{
		{Kind: "authority", Index: 0, Label: "white list", Blocks: 1},
		{Kind: "param_flow", Index: 0, Label: "qps on item_id", Blocks: 1},
		{Kind: "param_flow", Index: 1, Label: "qps on query", Shadow: true, Blocks: 1},
	}
	if got, _ := json.Marshal(items.Rules); string(got) != mustJSON(t, wantRules) {
		t.Errorf("GET:/items rules = %s, want %s", got, mustJSON(t, wantRules))
	}
	if items.TopRule != 0 {
		t.Errorf("top rule = %d, want 0 (the first of the rules tied at one block)", items.TopRule)
	}
	// POST:/orders: named by a rule, no traffic yet: listed, with no series.
	if orders.Allowed != nil || orders.Totals != nil || orders.TopRule != -1 || len(orders.Rules) != 1 {
		t.Errorf("POST:/orders = %+v, want no counts, one rule, no top rule", orders)
	}
	// Rule 2 counted nothing: left out of the list, counted as quiet.
	if len(c.Hot) != 2 || !c.Hot[1].Shadow || c.Hot[0].Shadow || c.QuietHotRules != 1 {
		t.Fatalf("hot = %+v, quiet %d; want rules 0 and 1, the second a shadow rule, and 1 quiet", c.Hot, c.QuietHotRules)
	}
	if got := c.Hot[0].ByBlocked; len(got) != 1 || got[0].Value != "a" || got[0].Blocked != 1 || got[0].Passed != 2 {
		t.Errorf("rule 0 by blocked = %+v, want a: 2 passed, 1 blocked", got)
	}
	if c.Rules.Version != 1 || len(c.Rules.ParamFlow) != 3 || c.Rules.LastError != nil || c.Store == nil || c.Store.Enabled {
		t.Errorf("rules, store = %+v, %+v", c.Rules, c.Store)
	}

	// The more traffic, the newer the numbers: the same endpoint, no state in the page.
	f.request(t, "POST:/orders", map[string]string{"api_key": "k"})
	if got := f.data(t).Resources[1].Totals; got == nil || got.OK != 1 {
		t.Errorf("POST:/orders totals after one request = %+v, want one ok", got)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRedactedValues(t *testing.T) {
	redact := func(param, value string) string {
		if param == "api_key" {
			return "hash:" + strings.Repeat("x", len(value))
		}
		return value
	}
	f := newConsoleFixture(t, redact)
	f.request(t, "POST:/orders", map[string]string{"api_key": "s3cret"})
	f.request(t, "GET:/items", map[string]string{"item_id": "visible"})
	for _, target := range []string{"/hot", "/console/data"} {
		_, _, body := get(t, f.h, target)
		if strings.Contains(body, "s3cret") {
			t.Errorf("GET %s shows the sensitive value: %s", target, body)
		}
		for _, want := range []string{"hash:xxxxxx", "visible"} {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s lacks %q: %s", target, want, body)
			}
		}
	}
}

func TestConsolePages(t *testing.T) {
	h := New(Options{})
	tests := []struct {
		target     string
		wantStatus int
		wantType   string
		wantBody   string
	}{
		{"/", http.StatusOK, "text/html; charset=utf-8", `<script src="/console/app.js" defer>`},
		{"/console/app.js", http.StatusOK, "text/javascript; charset=utf-8", "/console/data"},
		{"/console/app.css", http.StatusOK, "text/css; charset=utf-8", "--allowed"},
		{"/console/icon.svg", http.StatusOK, "image/svg+xml", "<svg"},
		{"/console/", http.StatusNotFound, "", ""},
		{"/console/nope.js", http.StatusNotFound, "", ""},
		{"/index.html", http.StatusNotFound, "", ""},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:9002"+tt.target, nil))
		if rec.Code != tt.wantStatus {
			t.Errorf("GET %s = %d, want %d", tt.target, rec.Code, tt.wantStatus)
			continue
		}
		if tt.wantStatus != http.StatusOK {
			continue
		}
		if got := rec.Header().Get("Content-Type"); got != tt.wantType {
			t.Errorf("GET %s Content-Type = %q, want %q", tt.target, got, tt.wantType)
		}
		if !strings.Contains(rec.Body.String(), tt.wantBody) {
			t.Errorf("GET %s lacks %q", tt.target, tt.wantBody)
		}
		if got := rec.Header().Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'none'") {
			t.Errorf("GET %s CSP = %q, want one that allows only this origin", tt.target, got)
		}
	}
	// The console is read-only.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://localhost:9002/console/data", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/data = %d, want 405", rec.Code)
	}
	// With nothing wired in, the data still renders.
	code, _, body := get(t, h, "/console/data")
	if code != http.StatusOK || !strings.Contains(body, `"store":null`) {
		t.Errorf("GET /console/data with empty Options = %d %s", code, body)
	}
}

func TestHotRemaining(t *testing.T) {
	top := []hotparam.RuleTop{{Rule: 0, Resource: "r", Param: "p", ByPassed: []hotparam.TopValue{{Value: "v", Passed: 3}, {Value: "w", Passed: 1}}}}
	h := New(Options{
		Top: func(int) []hotparam.RuleTop { return top },
		Remaining: func(_ time.Time, rule int, value string) (int64, bool) {
			return 7, rule == 0 && value == "v"
		},
	})
	_, _, body := get(t, h, "/hot")
	var hot Hot
	if err := json.Unmarshal([]byte(body), &hot); err != nil {
		t.Fatal(err)
	}
	got := hot.Rules[0].ByPassed
	if got[0].Remaining == nil || *got[0].Remaining != 7 || got[1].Remaining != nil {
		t.Errorf("remaining = %v, %v; want 7, null", got[0].Remaining, got[1].Remaining)
	}
}

// manyRulesConsole serves the console over n hot-param rules on n resources, each with one
// decision recorded.
func manyRulesConsole(tb testing.TB, n int) http.Handler {
	tb.Helper()
	var b strings.Builder
	b.WriteString("param_flow:\n")
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("GET:/r/%04d", i)
		fmt.Fprintf(&b, "  - {resource: %q, param: p, grade: qps, count: 5, duration: 1s, capacity: 10}\n", names[i])
	}
	file := filepath.Join(tb.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	store, err := rulestore.New(rulestore.Options{File: file})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := metrics.New(metrics.Options{NoRuntime: true, Now: func() time.Time { return now }})
	m.SetResources(names)
	for _, r := range names {
		m.Decision("ext_authz", "", r, policy.Allowed, 0)
	}
	return New(Options{
		Rules:   store.Current,
		Top:     func(k int) []hotparam.RuleTop { return store.Current().ParamFlow.Top(now, k) },
		Traffic: m.Snapshot,
		Now:     func() time.Time { return now },
	})
}

// TestConsoleDataBounded: with more rules and resources than the console lists, the data stays
// small and says how much it left out.
func TestConsoleDataBounded(t *testing.T) {
	const n = 2000
	h := manyRulesConsole(t, n)
	_, _, body := get(t, h, "/console/data")
	var c Console
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want int
	}{
		{"resources listed", len(c.Resources), MaxConsoleResources},
		{"resources left out", c.MoreResources, n - MaxConsoleResources + 1}, // "other" is listed too
		{"rules listed", len(c.Rules.ParamFlow), MaxConsoleRules},
		{"rules left out", c.MoreRules, n - MaxConsoleRules},
		{"hot rules listed", len(c.Hot), 0},
		{"quiet hot rules", c.QuietHotRules, n},
	}
	for _, tt := range checks {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.what, tt.got, tt.want)
		}
	}
	if len(body) > 512<<10 {
		t.Errorf("/console/data with %d rules = %d bytes, want <= 512 KiB", n, len(body))
	}
	t.Logf("/console/data with %d rules: %d bytes", n, len(body))
}

// BenchmarkConsoleData measures one poll of the console with 2,000 rules and 100 resources
// with per-second counts.
func BenchmarkConsoleData(b *testing.B) {
	h := manyRulesConsole(b, 2000)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:9002/console/data", nil))
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/poll")
}
