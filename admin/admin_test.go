package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

func get(t *testing.T, h http.Handler, target string) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:9002"+target, nil))
	body, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Code, rec.Header().Get("Content-Type"), string(body)
}

func TestHealthAndReady(t *testing.T) {
	ready := false
	h := New(Options{Ready: func() bool { return ready }})
	tests := []struct {
		ready      bool
		target     string
		wantStatus int
	}{
		{false, "/healthz", http.StatusOK},
		{false, "/readyz", http.StatusServiceUnavailable},
		{true, "/healthz", http.StatusOK},
		{true, "/readyz", http.StatusOK},
	}
	for _, tt := range tests {
		ready = tt.ready
		if got, _, body := get(t, h, tt.target); got != tt.wantStatus {
			t.Errorf("ready=%v GET %s = %d (%q), want %d", tt.ready, tt.target, got, body, tt.wantStatus)
		}
	}

	// No readiness func: never ready.
	if got, _, _ := get(t, New(Options{}), "/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("readyz without Ready = %d, want 503", got)
	}
	// Endpoints with nothing behind them are not served.
	for _, target := range []string{"/metrics", "/rules", "/hot", "/nope"} {
		if got, _, _ := get(t, New(Options{}), target); got != http.StatusNotFound {
			t.Errorf("GET %s with empty Options = %d, want 404", target, got)
		}
	}
}

func TestMetrics(t *testing.T) {
	h := New(Options{Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "some_metric 1\n")
	})})
	code, _, body := get(t, h, "/metrics")
	if code != http.StatusOK || body != "some_metric 1\n" {
		t.Errorf("GET /metrics = %d %q, want 200 %q", code, body, "some_metric 1\n")
	}
}

func TestRules(t *testing.T) {
	loaded := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	failed := loaded.Add(90 * time.Second)
	set := &rulestore.Set{
		Version:  3,
		LoadedAt: loaded,
		File:     "/etc/extauthz/rules.yaml",
		Rules: rulestore.Rules{
			Authority: []authority.Rule{
				{Resource: "GET:/hello", Strategy: authority.White, Origins: []string{"serviceA", "10.1.0.0/16"}},
				{Resource: "GET:/admin", Strategy: authority.Black, Origins: []string{"bad"}, MissingOrigin: authority.MissingDeny},
				{Resource: "GET:/trial", Strategy: authority.Black, Origins: []string{"bot"}, Shadow: true},
			},
			ParamFlow: []hotparam.Rule{
				{Resource: "POST:/order", Param: "item_id", Grade: hotparam.QPS, Count: 5, Duration: time.Second, Burst: 2,
					Items: map[string]int64{"4343433": 1000}, Capacity: 100000},
				{Resource: "POST:/order", Param: "user", Grade: hotparam.QPS, Count: 10, Duration: time.Minute,
					Behavior: hotparam.Throttle, MaxQueueingTime: 500 * time.Millisecond, Shadow: true},
				{Resource: "GET:/stream", Param: "client_ip", Grade: hotparam.Concurrency, Count: 3, Lease: time.Minute, Cluster: true},
			},
			Warnings: []string{"param_flow[2]: concurrency rules apply only to ShouldRateLimit calls"},
		},
	}
	var lastErr *rulestore.LoadError
	h := New(Options{
		Rules:     func() *rulestore.Set { return set },
		LastError: func() *rulestore.LoadError { return lastErr },
	})

	code, ctype, body := get(t, h, "/rules")
	if code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("GET /rules = %d %s, want 200 application/json", code, ctype)
	}
	var got Rules
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	want := Rules{
		Version:  3,
		LoadedAt: &loaded,
		File:     "/etc/extauthz/rules.yaml",
		Warnings: []string{"param_flow[2]: concurrency rules apply only to ShouldRateLimit calls"},
		Authority: []AuthorityRule{
			{Resource: "GET:/hello", Strategy: "white", Origins: []string{"serviceA", "10.1.0.0/16"}, MissingOrigin: "deny"},
			{Resource: "GET:/admin", Strategy: "black", Origins: []string{"bad"}, MissingOrigin: "deny"},
			{Resource: "GET:/trial", Strategy: "black", Origins: []string{"bot"}, MissingOrigin: "allow", Shadow: true},
		},
		ParamFlow: []ParamRule{
			{Resource: "POST:/order", Param: "item_id", Grade: "qps", Count: 5, Duration: "1s", Burst: 2, Behavior: "reject",
				Items: map[string]int64{"4343433": 1000}, Capacity: 100000},
			{Resource: "POST:/order", Param: "user", Grade: "qps", Count: 10, Duration: "1m0s", Behavior: "throttle",
				MaxQueueingTime: "500ms", Shadow: true},
			{Resource: "GET:/stream", Param: "client_ip", Grade: "concurrency", Count: 3, Lease: "1m0s", Cluster: true},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /rules\n got %+v\nwant %+v", got, want)
	}
	if !strings.Contains(body, `"last_error": null`) {
		t.Errorf("last_error not null before a failed load: %s", body)
	}

	lastErr = &rulestore.LoadError{Time: failed, Message: "rules.yaml: param_flow[0] (POST:/order) count: must be >= 0"}
	_, _, body = get(t, h, "/rules")
	var after Rules
	if err := json.Unmarshal([]byte(body), &after); err != nil {
		t.Fatal(err)
	}
	wantErr := &LastError{Time: failed, Message: lastErr.Message}
	if !reflect.DeepEqual(after.LastError, wantErr) {
		t.Errorf("last_error = %+v, want %+v", after.LastError, wantErr)
	}
	if after.Version != 3 || len(after.ParamFlow) != 3 {
		t.Errorf("rules in force changed with the error: version %d, %d param rules", after.Version, len(after.ParamFlow))
	}
}

func TestRulesEmpty(t *testing.T) {
	h := New(Options{Rules: func() *rulestore.Set { return &rulestore.Set{} }})
	_, _, body := get(t, h, "/rules")
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"version": 0.0, "loaded_at": nil, "file": "", "last_error": nil, "warnings": []any{},
		"authority": []any{}, "param_flow": []any{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("empty /rules = %v, want %v", got, want)
	}
}

func TestHot(t *testing.T) {
	var gotN []int
	top := []hotparam.RuleTop{{
		Rule: 0, Resource: "POST:/order", Param: "item_id",
		ByPassed:  []hotparam.TopValue{{Value: "a", Passed: 9, Blocked: 1}, {Value: "b", Passed: 5}, {Value: "c", Passed: 1}},
		ByBlocked: []hotparam.TopValue{{Value: "a", Passed: 9, Blocked: 1}},
	}}
	h := New(Options{Top: func(n int) []hotparam.RuleTop {
		gotN = append(gotN, n)
		return top
	}})

	tests := []struct {
		target     string
		wantStatus int
		wantN      int
		wantPassed []string
	}{
		{"/hot", http.StatusOK, DefaultTopN, []string{"a", "b", "c"}},
		{"/hot?n=2", http.StatusOK, 2, []string{"a", "b"}},
		{"/hot?n=0", http.StatusBadRequest, 0, nil},
		{"/hot?n=-3", http.StatusBadRequest, 0, nil},
		{"/hot?n=x", http.StatusBadRequest, 0, nil},
		{"/hot?n=1001", http.StatusBadRequest, 0, nil},
	}
	for _, tt := range tests {
		gotN = nil
		code, _, body := get(t, h, tt.target)
		if code != tt.wantStatus {
			t.Errorf("GET %s = %d (%s), want %d", tt.target, code, body, tt.wantStatus)
			continue
		}
		if code != http.StatusOK {
			if len(gotN) != 0 {
				t.Errorf("GET %s called Top on a bad request", tt.target)
			}
			continue
		}
		if len(gotN) != 1 || gotN[0] != tt.wantN {
			t.Errorf("GET %s: Top called with %v, want [%d]", tt.target, gotN, tt.wantN)
		}
		var got Hot
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		if got.N != tt.wantN || len(got.Rules) != 1 {
			t.Fatalf("GET %s = %+v", tt.target, got)
		}
		var values []string
		for _, v := range got.Rules[0].ByPassed {
			values = append(values, v.Value)
		}
		if !reflect.DeepEqual(values, tt.wantPassed) {
			t.Errorf("GET %s by_passed = %v, want %v", tt.target, values, tt.wantPassed)
		}
		if r := got.Rules[0]; r.Resource != "POST:/order" || r.Param != "item_id" || len(r.ByBlocked) != 1 || r.ByBlocked[0].Blocked != 1 {
			t.Errorf("GET %s rule = %+v", tt.target, r)
		}
	}
}

func TestMethodNotAllowed(t *testing.T) {
	h := New(Options{Ready: func() bool { return true }})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://localhost:9002/readyz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz = %d, want 405", rec.Code)
	}
}

func TestPProf(t *testing.T) {
	tests := []struct {
		pprof      bool
		target     string
		wantStatus int
		wantBody   string
	}{
		{false, "/debug/pprof/", http.StatusNotFound, ""},
		{false, "/debug/pprof/goroutine?debug=1", http.StatusNotFound, ""},
		{true, "/debug/pprof/", http.StatusOK, "goroutine"},
		{true, "/debug/pprof/goroutine?debug=1", http.StatusOK, "TestPProf"},
		{true, "/debug/pprof/cmdline", http.StatusOK, "admin.test"},
	}
	for _, tt := range tests {
		code, _, body := get(t, New(Options{PProf: tt.pprof}), tt.target)
		if code != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
			t.Errorf("PProf=%v GET %s = %d (%.80q), want %d containing %q", tt.pprof, tt.target, code, body, tt.wantStatus, tt.wantBody)
		}
	}
}
