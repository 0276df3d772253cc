package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// The rules of the admin /check tests: two an hour per item (so nothing refills during the
// test), a black list, and a shadow rule.
const checkRules = `
authority:
  - {resource: "GET:/items", strategy: black, origins: [scraper]}
param_flow:
  - {resource: "GET:/items", param: item_id, grade: qps, count: 2, duration: 1h}
  - {resource: "GET:/search", param: q, grade: qps, count: 1, duration: 1h, shadow: true}
`

// checkAnswer is the part of POST /check's answer the tests read.
type checkAnswer struct {
	Allowed bool   `json:"allowed"`
	Probe   bool   `json:"probe"`
	Rule    string `json:"rule"`
	Reason  string `json:"reason"`
	Entry   *int   `json:"entry"`
	Param   string `json:"param"`
	Value   string `json:"value"`
	Version uint64 `json:"rules_version"`
	Shadow  *struct {
		Rule string `json:"rule"`
	} `json:"shadow"`
	Entries []struct {
		Rule      string `json:"rule"`
		Limit     int64  `json:"limit"`
		Remaining *int64 `json:"remaining"`
	} `json:"entries"`
}

func (s *service) post(t *testing.T, path, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(s.adminURL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func (s *service) debugCheck(t *testing.T, body string) checkAnswer {
	t.Helper()
	code, h, raw := s.post(t, "/check", body)
	if code != http.StatusOK {
		t.Fatalf("POST /check %s = %d %s, want 200", body, code, raw)
	}
	if ct, ns := h.Get("Content-Type"), h.Get("X-Content-Type-Options"); ct != "application/json" || ns != "nosniff" {
		t.Errorf("POST /check: Content-Type %q, X-Content-Type-Options %q; want application/json, nosniff", ct, ns)
	}
	var a checkAnswer
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		t.Fatalf("POST /check answer %s: %v", raw, err)
	}
	return a
}

// get GETs url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func itemDescriptor(item string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "extauthz", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
			{Key: "resource", Value: "GET:/items"}, {Key: "origin", Value: "web"}, {Key: "item_id", Value: item},
		},
	}}}
}

// TestAdminCheck: POST /check answers what the service would, through the binary's admin
// listener: a probe takes nothing, so the real calls still get their whole allowance; once
// they spent it, the probe names the rule and the reason; consume spends as a call does; the
// checks are not counted in the decision metrics.
func TestAdminCheck(t *testing.T) {
	s := newService(t, []byte(checkRules))
	item := `{"resource": "GET:/items", "origin": "web", "params": {"item_id": "42"}}`
	for i := range 5 {
		a := s.debugCheck(t, item)
		if !a.Allowed || !a.Probe || a.Rule != "" || len(a.Entries) != 1 || a.Entries[0].Rule != "param_flow[0]" ||
			a.Entries[0].Remaining == nil || *a.Entries[0].Remaining != 2 || a.Version == 0 {
			t.Fatalf("probe %d of a full bucket: %+v, want allowed with 2 of param_flow[0] left", i, a)
		}
	}
	// The probes took nothing: the two calls of the allowance pass, the third is refused.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := s.limit(t, itemDescriptor("42")).GetOverallCode(); got != want {
			t.Fatalf("call %d after the probes: %v, want %v", i, got, want)
		}
	}
	a := s.debugCheck(t, item)
	if a.Allowed || a.Rule != "param_flow[0]" || a.Reason != "qps" || a.Param != "item_id" || a.Value != "42" || a.Entry == nil || *a.Entry != 0 {
		t.Errorf("probe of the spent value: %+v, want refused by param_flow[0], qps, item_id 42", a)
	}
	// The same, as raw descriptors.
	raw := `{"domain": "extauthz", "descriptors": [{"entries": [{"key": "resource", "value": "GET:/items"},
		{"key": "origin", "value": "web"}, {"key": "item_id", "value": "42"}]}]}`
	if a := s.debugCheck(t, raw); a.Allowed || a.Rule != "param_flow[0]" || a.Reason != "qps" {
		t.Errorf("descriptor probe of the spent value: %+v, want refused by param_flow[0], qps", a)
	}
	// Authority first, whatever the tokens.
	if a := s.debugCheck(t, `{"resource": "GET:/items", "origin": "scraper", "params": {"item_id": "7"}}`); a.Allowed ||
		a.Rule != "authority[0]" || a.Reason != "in_black_list" {
		t.Errorf("black-listed origin: %+v, want refused by authority[0], in_black_list", a)
	}
	// A shadow rule is reported and does not refuse.
	s.debugCheck(t, `{"resource": "GET:/search", "params": {"q": "x"}, "consume": true}`)
	if a := s.debugCheck(t, `{"resource": "GET:/search", "params": {"q": "x"}}`); !a.Allowed || a.Shadow == nil || a.Shadow.Rule != "param_flow[1]" {
		t.Errorf("shadow rule: %+v, want allowed with shadow param_flow[1]", a)
	}

	// consume spends as a call does: two checks of a new value, then the call is refused.
	for i := range 2 {
		if a := s.debugCheck(t, `{"resource": "GET:/items", "origin": "web", "params": {"item_id": "9"}, "consume": true}`); !a.Allowed || a.Probe {
			t.Fatalf("consuming check %d: %+v, want allowed, not a probe", i, a)
		}
	}
	if got := s.limit(t, itemDescriptor("9")).GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("call after two consuming checks: %v, want OVER_LIMIT", got)
	}

	// Only the three real calls and the one after the consuming checks are counted.
	code, metrics := get(t, s.adminURL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	var total float64
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "extauthz_decisions_total{") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			total += v
		}
	}
	if total != 4 {
		t.Errorf("extauthz_decisions_total sums to %v, want the 4 calls (the checks are not counted)", total)
	}
}

// TestAdminCheckBadInput: what is not a check gets a 400 (413 when too large) saying why.
func TestAdminCheckBadInput(t *testing.T) {
	s := sharedService(t)
	for _, tt := range []struct {
		body string
		code int
		want string
	}{
		{``, 400, "not a check"},
		{`{"resource": "GET:/items"`, 400, "not a check"},
		{`{"resource": "GET:/items", "orign": "web"}`, 400, `unknown field \"orign\"`},
		{`{"resource": "GET:/items"} {}`, 400, "more than one JSON value"},
		{`{"origin": "web"}`, 400, "resource is missing"},
		{`{"resource": "GET:/items", "params": {"item_id": 42}}`, 400, "a param is a string or a non-empty list of strings"},
		{`{"resource": "GET:/items", "params": {"item_id": []}}`, 400, "a param is a string"},
		{`{"resource": "GET:/items", "descriptors": []}`, 400, "not both"},
		{`{"domain": "d"}`, 400, "domain goes with descriptors"},
		{`{"descriptors": []}`, 400, "no descriptors"},
		{`{"descriptors": [{"entries": [{"key": "", "value": "x"}]}]}`, 400, "descriptors[0].entries[0].key"},
		{`{"resource": "` + strings.Repeat("r", 5000) + `"}`, 400, "resource is over 4096 bytes"},
		{`{"resource": "GET:/items", "params": {"p": "` + strings.Repeat("v", 70<<10) + `"}}`, 413, "over 65536 bytes"},
	} {
		code, h, body := s.post(t, "/check", tt.body)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("POST /check %.60q = %d %s, want %d with %q", tt.body, code, body, tt.code, tt.want)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("POST /check %.60q: no nosniff", tt.body)
		}
	}
	if code, _ := get(t, s.adminURL+"/check"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /check = %d, want 405", code)
	}
}

// TestAdminHosts: the admin listener refuses a Host header that names anything but loopback,
// an IP address or its configured names, as a page behind a DNS rebinding sends.
func TestAdminHosts(t *testing.T) {
	s := sharedService(t)
	for _, tt := range []struct {
		host string
		want int
	}{
		{"", http.StatusOK}, // the URL's 127.0.0.1:port
		{"localhost:9002", http.StatusOK},
		{"rebind.evil.example:9002", http.StatusMisdirectedRequest},
		{"extauthz.extauthz.svc:9002", http.StatusMisdirectedRequest}, // not configured here
	} {
		for _, path := range []string{"/rules", "/hot", "/", "/metrics"} {
			req, err := http.NewRequest(http.MethodGet, s.adminURL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("GET %s (Host %q): %v", path, tt.host, err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("GET %s, Host %q = %d, want %d", path, tt.host, resp.StatusCode, tt.want)
			}
		}
	}
}

// TestAdminHostsConfigured: names set in admin.hosts (here by its variable) are answered, and
// still no other.
func TestAdminHostsConfigured(t *testing.T) {
	rules, err := filepath.Abs(rulesYAML)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := filepath.Abs(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, testbin.Options{
		Binary: binary,
		Args: []string{"serve", "--config", cfg, "--rules", rules,
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		Env:   []string{"EXTAUTHZ_ADMIN_HOSTS=extauthz.extauthz.svc,*.example.org"},
		Ready: 15 * time.Second,
	})
	for host, want := range map[string]int{
		"extauthz.extauthz.svc:9002": http.StatusOK,
		"console.example.org":        http.StatusOK,
		"example.org":                http.StatusMisdirectedRequest,
		"rebind.evil.example":        http.StatusMisdirectedRequest,
	} {
		req, err := http.NewRequest(http.MethodGet, "http://"+p.AdminAddr+"/rules", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /rules, Host %q = %d, want %d", host, resp.StatusCode, want)
		}
	}
}
