package dashboard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/rulestore"
)

var names = []string{"user", "ip"}

const startRules = `{"paramFlowRules":[{"resource":"api","paramIdx":1,"count":5,"paramFlowItemList":[{"object":"10.0.0.1","classType":"java.lang.String","count":50}]}],
"authorityRules":[{"resource":"api","limitApp":"web,mobile","strategy":0}]}`

// at is the fixed instant of the tests.
var at = time.Date(2025, 3, 1, 12, 0, 30, 500_000_000, time.UTC)

// traffic is a snapshot at at: resource api allowed 3 and blocked 1 in each of the 2 seconds
// before the current one, which counts 7 (still counting, never reported).
func traffic(now time.Time) metrics.Snapshot {
	n := int(metrics.Window / time.Second)
	t := metrics.Traffic{Resource: "api", Allowed: make([]uint32, n), Blocked: make([]uint32, n)}
	t.Allowed[n-3], t.Blocked[n-3] = 3, 1
	t.Allowed[n-2], t.Blocked[n-2] = 3, 1
	t.Allowed[n-1] = 7
	other := metrics.Traffic{Resource: metrics.Other, Allowed: make([]uint32, n), Blocked: make([]uint32, n)}
	other.Allowed[n-2] = 9
	return metrics.Snapshot{Time: now, Window: metrics.Window, Resources: []metrics.Traffic{t, other}}
}

type fixture struct {
	store *rulestore.Store
	srv   *Server
	mem   *Memory
}

func newFixture(t *testing.T, allow bool) *fixture {
	t.Helper()
	parse := rulestore.ParseOptions{ParamNames: names}
	store, err := rulestore.New(rulestore.Options{Parse: parse, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.LoadDocuments([]rulestore.Document{{Name: "rules.json", Data: []byte(startRules)}}, 0); err != nil {
		t.Fatal(err)
	}
	f := Format{ParamNames: names}
	mem := &Memory{Store: store, Format: f, Allow: allow, Source: "rules.json", Now: func() time.Time { return at }}
	srv := New(Options{Rules: store.Current, Traffic: traffic, Format: f, Parse: parse, Pusher: mem,
		Allowed: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}, Now: func() time.Time { return at }})
	return &fixture{store: store, srv: srv, mem: mem}
}

// do sends a command from the dashboard's address (192.0.2.1) unless from is given.
func (f *fixture) do(method, target string, form url.Values, from ...string) (int, string) {
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=UTF-8")
	} else {
		req = httptest.NewRequest(method, target, nil)
	}
	req.RemoteAddr = "192.0.2.1:40000"
	if len(from) > 0 {
		req.RemoteAddr = from[0]
	}
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

func TestCommands(t *testing.T) {
	f := newFixture(t, false)
	for _, c := range []struct {
		target   string
		code     int
		body     string
		contains bool
	}{
		{"/version", 200, Version, false},
		{"/", 400, "Invalid command", false},
		{"/getClusterMode", 400, "Unknown command `getClusterMode`", false},
		{"/getRules?type=authority", 200, `[{"limitApp":"web,mobile","regex":false,"resource":"api","strategy":0}]`, false},
		{"/getRules?type=flow", 200, `[]`, false},
		{"/getRules?type=nope", 400, "invalid type", false},
		{"/getParamFlowRules", 200, `[{"burstCount":0,"clusterMode":false,"controlBehavior":0,"count":5,"durationInSec":1,"grade":1,"limitApp":"default","maxQueueingTimeMs":0,"paramFlowItemList":[{"classType":"java.lang.String","count":50,"object":"10.0.0.1"}],"paramIdx":1,"regex":false,"resource":"api"}]`, false},
		// the two whole seconds before at, pass 3, block 1, success 3; "other" is no resource
		{"/metric?startTime=1740830400000&endTime=1740830430000&refetch=false", 200, "1740830428000|api|3|1|3|0|0|0|0|0\n1740830429000|api|3|1|3|0|0|0|0|0\n", false},
		{"/metric?startTime=1740830429000&endTime=1740830435000", 200, "1740830429000|api|3|1|3|0|0|0|0|0\n", false},
		{"/metric?startTime=1740830400000&maxLines=1", 200, "1740830428000|api|3|1|3|0|0|0|0|0\n", false},
		{"/metric", 200, "", false},
		{"/metric?startTime=abc", 500, "Command server error", false},
		{"/metric?startTime=1740830400000&identity=other-api", 200, "", false},
		{"/clusterNode?type=notZero", 200, `"passQps":3,"resource":"api","successQps":3,"threadNum":0,"timestamp":1740830430500,"totalQps":4`, true},
		{"/jsonTree", 200, `"parentId":"0","passQps":3,"resource":"api"`, true},
		{"/api", 200, `{"desc":"Set parameter flow rules, while previous rules will be replaced.","url":"/setParamFlowRules"}`, true},
	} {
		code, body := f.do("GET", c.target, nil)
		if code != c.code || (!c.contains && body != c.body) || (c.contains && !strings.Contains(body, c.body)) {
			t.Errorf("GET %s = %d %q, want %d %q", c.target, code, body, c.code, c.body)
		}
	}
}

func TestParams(t *testing.T) {
	got := map[string]string{}
	// trimmed before it is decoded: a + at an end stays a space
	if err := sentinelParams("a=1&b= +x+ &&c=&=d&ee&e=&type=%61uthority&x=1#y=2", got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "1", "b": " x ", "type": "authority", "x": "1"}
	if len(got) != len(want) {
		t.Fatalf("params %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if err := sentinelParams("data=%zz", map[string]string{}); err == nil {
		t.Error("a bad escape: no error")
	}
}

func TestRefusedCaller(t *testing.T) {
	f := newFixture(t, true)
	code, body := f.do("GET", "/getParamFlowRules", nil, "198.51.100.7:5000")
	if code != http.StatusForbidden || !strings.Contains(body, "198.51.100.7") {
		t.Fatalf("from another address: %d %q, want 403", code, body)
	}
	code, _ = f.do("POST", "/setParamFlowRules", url.Values{"data": {"[]"}}, "198.51.100.7:5000")
	if code != http.StatusForbidden || len(f.store.Current().Rules.ParamFlow) != 1 {
		t.Fatalf("a push from another address: %d, rules %d; want 403 and the rule kept", code, len(f.store.Current().Rules.ParamFlow))
	}
}

func TestPushFileRefused(t *testing.T) {
	f := newFixture(t, false)
	code, body := f.do("POST", "/setParamFlowRules", url.Values{"data": {`[{"resource":"api","paramIdx":0,"count":1}]`}})
	if code != http.StatusBadRequest || body == msgSuccess || !strings.Contains(body, "allow_memory_overrides") {
		t.Fatalf("push onto a file source: %d %q, want a failure naming allow_memory_overrides", code, body)
	}
	if r := f.store.Current().Rules.ParamFlow[0]; r.Param != "ip" || r.Count != 5 {
		t.Fatalf("rule in force %+v changed", r)
	}
}

func TestPushInMemory(t *testing.T) {
	f := newFixture(t, true)
	// Pushed as the dashboard posts it: the JSON form-encoded once; the handler decodes the
	// value a second time, so the + of the item becomes a space, as in Sentinel.
	data := `[{"resource":"api","limitApp":"default","grade":1,"paramIdx":0,"count":2.0,"controlBehavior":0,"durationInSec":1,"burstCount":0,"maxQueueingTimeMs":0,"paramFlowItemList":[{"object":"a+b","classType":"java.lang.String","count":9}],"clusterMode":false,"regex":false}]`
	code, body := f.do("POST", "/setParamFlowRules", url.Values{"data": {data}})
	if code != 200 || body != msgSuccess {
		t.Fatalf("push: %d %q", code, body)
	}
	set := f.store.Current()
	if len(set.Rules.ParamFlow) != 1 || set.Rules.ParamFlow[0].Param != "user" || set.Rules.ParamFlow[0].Count != 2 || set.Rules.ParamFlow[0].Items["a b"] != 9 {
		t.Fatalf("param-flow rules in force %+v", set.Rules.ParamFlow)
	}
	if len(set.Rules.Authority) != 1 || set.Rules.Authority[0].Origins[1] != "mobile" {
		t.Fatalf("authority rules in force %+v: want them kept", set.Rules.Authority)
	}
	v := f.mem.View(set)
	if n := len(v.Rules.Warnings); n == 0 || !strings.Contains(v.Rules.Warnings[n-1], "in memory only") || !strings.Contains(v.Rules.Warnings[n-1], "192.0.2.1") {
		t.Fatalf("view warnings %q, want the override", v.Rules.Warnings)
	}
	if len(set.Rules.Warnings) != len(v.Rules.Warnings)-1 {
		t.Fatal("View changed the set in force")
	}
	code, body = f.do("GET", "/getParamFlowRules", nil)
	var got []paramRuleJSON
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != 200 || len(got) != 1 || got[0].ParamIdx != 0 || got[0].ParamFlowItemList[0].Object != "a b" {
		t.Fatalf("read back: %d %s", code, body)
	}
}

func TestPushRefusedWhole(t *testing.T) {
	f := newFixture(t, true)
	for _, c := range []struct{ name, cmd, data, want string }{
		{"paramIdx out of range", "/setParamFlowRules", `[{"resource":"a","paramIdx":0,"count":1},{"resource":"b","paramIdx":5,"count":1}]`, "paramIdx"},
		{"negative count", "/setParamFlowRules", `[{"resource":"a","paramIdx":0,"count":-1}]`, "count"},
		{"not a list", "/setParamFlowRules", `{"resource":"a"}`, "JSON list"},
		{"bad second escape", "/setParamFlowRules", `[{"resource":"100%"}]`, "decode rule data error"},
		{"no strategy", "/setRules?type=authority", `[{"resource":"a","limitApp":"x"}]`, "strategy"},
		{"flow rules", "/setRules?type=flow", `[{"resource":"a","count":1}]`, "no flow rules"},
	} {
		code, body := f.do("POST", c.cmd, url.Values{"data": {c.data}})
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q, want 400 naming %q", c.name, code, body, c.want)
		}
	}
	if set := f.store.Current(); len(set.Rules.ParamFlow) != 1 || set.Rules.ParamFlow[0].Param != "ip" || len(set.Rules.Authority) != 1 {
		t.Fatalf("rules in force changed: %+v", set.Rules)
	}
	if code, _ := f.do("POST", "/setParamFlowRules", nil); code != http.StatusLengthRequired {
		t.Errorf("a POST without a body: %d, want 411", code)
	}
	req := httptest.NewRequest("POST", "/setParamFlowRules", strings.NewReader(`{"data":[]}`))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = "192.0.2.1:1"
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, req)
	if w.Code != http.StatusUnsupportedMediaType {
		t.Errorf("a JSON body: %d, want 415", w.Code)
	}
}

func TestInexpressible(t *testing.T) {
	f := Format{ParamNames: names}
	store, err := rulestore.New(rulestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	native := `{"authority":[{"resource":"a","strategy":"black","origins":["10.0.0.0/8"]}],"param_flow":[{"resource":"a","param":"tenant","count":1,"duration":"500ms"}]}`
	if err := store.LoadDocuments([]rulestore.Document{{Name: "r.json", Data: []byte(native)}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Sentinel(store.Current(), Authority); err == nil || !strings.Contains(err.Error(), "as addresses") {
		t.Errorf("authority: %v, want the CIDR named", err)
	}
	_, err = f.Sentinel(store.Current(), ParamFlow)
	if err == nil || !strings.Contains(err.Error(), `param "tenant"`) || !strings.Contains(err.Error(), "500ms") {
		t.Errorf("param flow: %v, want the param and the duration named", err)
	}
}
