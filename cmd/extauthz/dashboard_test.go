package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/extauthz/extauthz/dashboard"
	"github.com/extauthz/extauthz/internal/testkit/etcdtest"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// heartbeats is a fake dashboard: it takes heartbeats as the dashboard does and hands them
// to the test.
func heartbeats(t *testing.T) (addr string, got <-chan url.Values) {
	t.Helper()
	ch := make(chan url.Values, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != dashboard.HeartbeatPath || r.ParseForm() != nil {
			http.NotFound(w, r)
			return
		}
		select {
		case ch <- r.PostForm:
		default:
		}
		_, _ = io.WriteString(w, `{"success":true,"code":0,"msg":"success","data":null}`)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), ch
}

func nextBeat(t *testing.T, got <-chan url.Values) url.Values {
	t.Helper()
	select {
	case f := <-got:
		return f
	case <-time.After(15 * time.Second):
		t.Fatal("no heartbeat within 15s")
	}
	return nil
}

// commandAddr is the command listener's address the process logged.
func commandAddr(t *testing.T, p *proc) string {
	t.Helper()
	e := p.Entry("sentinel dashboard commands serving")
	if e == nil {
		t.Fatal("no \"sentinel dashboard commands serving\" line")
	}
	return e["command_addr"].(string)
}

// command sends a command as the dashboard does: a GET with a query, or a form POST.
func command(t *testing.T, addr, name string, form url.Values, post bool) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if post {
		resp, err = http.PostForm("http://"+addr+"/"+name, form)
	} else {
		resp, err = http.Get("http://" + addr + "/" + name + "?" + form.Encode())
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const dashboardRules = `{"paramFlowRules":[{"resource":"POST:/order","paramIdx":0,"count":100}]}`

// The binary registers with the dashboard every interval, with the fields the dashboard reads,
// and its command port answers the dashboard's reads; a push onto a rules file is refused.
func TestBinaryDashboardHeartbeat(t *testing.T) {
	dash, beats := heartbeats(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.json", dashboardRules)
	p := testbin.Start(t, testbin.Options{Binary: binary(t), Dir: dir, Env: []string{
		"EXTAUTHZ_SENTINEL_DASHBOARD_ADDRS=" + dash, "EXTAUTHZ_SENTINEL_DASHBOARD_COMMAND_ADDR=127.0.0.1:0",
		"EXTAUTHZ_SENTINEL_DASHBOARD_APP=edge-gw", "EXTAUTHZ_SENTINEL_DASHBOARD_HEARTBEAT_INTERVAL=300ms",
		"EXTAUTHZ_PARAM_NAMES=item_id"},
		Args: []string{"serve", "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}})
	cmdAddr := commandAddr(t, p)
	_, port, _ := strings.Cut(cmdAddr, ":")
	first := nextBeat(t, beats)
	want := map[string]string{"app": "edge-gw", "app_type": "0", "ip": "127.0.0.1", "port": port,
		"v": dashboard.Version, "pid": strconv.Itoa(p.Cmd.Process.Pid)}
	for k, v := range want {
		if first.Get(k) != v {
			t.Errorf("heartbeat %s = %q, want %q (all: %v)", k, first.Get(k), v, first)
		}
	}
	second := nextBeat(t, beats)
	v1, _ := strconv.ParseInt(first.Get("version"), 10, 64)
	v2, _ := strconv.ParseInt(second.Get("version"), 10, 64)
	if v2 <= v1 || first.Get("hostname") == "" {
		t.Errorf("heartbeats' version %d then %d, hostname %q: want a later send time, a host name", v1, v2, first.Get("hostname"))
	}
	p.WaitLog(t, "dashboard heartbeat taken", 5*time.Second)

	code, body := command(t, cmdAddr, "getParamFlowRules", url.Values{}, false)
	if code != 200 || !strings.Contains(body, `"paramIdx":0`) || !strings.Contains(body, `"resource":"POST:/order"`) {
		t.Fatalf("getParamFlowRules = %d %s", code, body)
	}
	code, body = command(t, cmdAddr, "setParamFlowRules", url.Values{"data": {`[{"resource":"POST:/order","paramIdx":0,"count":1}]`}}, true)
	if code != http.StatusBadRequest || !strings.Contains(body, "allow_memory_overrides") {
		t.Fatalf("a push onto the rules file = %d %q, want 400 naming allow_memory_overrides", code, body)
	}
	p.WaitLog(t, "dashboard push refused", 5*time.Second)
	if e := p.Entry("dashboard push refused"); e == nil || e["caller"] != "127.0.0.1" {
		t.Fatalf("the refused push's log line %v, want its caller", e)
	}
}

// With in-memory overrides allowed, a push from the dashboard is enforced at once, logged with
// its caller and rules, and /rules says it is in memory only.
func TestBinaryDashboardPushInMemory(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.json", dashboardRules)
	p := testbin.Start(t, testbin.Options{Binary: binary(t), Dir: dir, Env: []string{
		"EXTAUTHZ_SENTINEL_DASHBOARD_COMMAND_ADDR=127.0.0.1:0", "EXTAUTHZ_SENTINEL_DASHBOARD_ALLOWED_CALLERS=127.0.0.0/8",
		"EXTAUTHZ_SENTINEL_DASHBOARD_ALLOW_MEMORY_OVERRIDES=true", "EXTAUTHZ_PARAM_NAMES=item_id"},
		Args: []string{"serve", "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}})
	rl := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	for i := range 3 {
		if got := rateLimit(t, rl, "POST:/order", "sku-1"); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d before the push: %v", i, got)
		}
	}
	code, body := command(t, commandAddr(t, p), "setParamFlowRules",
		url.Values{"data": {`[{"resource":"POST:/order","paramIdx":0,"count":1,"durationInSec":60}]`}}, true)
	if code != 200 || body != "success" {
		t.Fatalf("push = %d %q", code, body)
	}
	if got := rateLimit(t, rl, "POST:/order", "sku-2"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the first call after the push: %v", got)
	}
	if got := rateLimit(t, rl, "POST:/order", "sku-2"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the second call after the push: %v, want OVER_LIMIT (count 1 a minute)", got)
	}
	p.WaitLog(t, "dashboard push applied", 5*time.Second)
	e := p.Entry("dashboard push applied")
	if e == nil || e["caller"] != "127.0.0.1" || e["to"] != "memory" || !strings.Contains(fmt.Sprint(e["rules_pushed"]), "count: 1") {
		t.Fatalf("the push's log line %v", e)
	}
	_, rulesBody := p.Get(t, "/rules")
	if !strings.Contains(rulesBody, "in memory only") {
		t.Fatalf("/rules does not say the rules are in memory only: %s", rulesBody)
	}
}

// A rule pushed from the dashboard to one replica is written through to etcd and enforced by
// a second replica watching the same key; a set refused whole leaves etcd and both replicas
// as they were.
func TestBinaryDashboardPushEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const key = "/extauthz/dashboard.json"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, key, `{"authorityRules":[{"resource":"POST:/order","limitApp":"serviceA","strategy":0}]}`); err != nil {
		t.Fatal(err)
	}
	env := []string{"EXTAUTHZ_RULES_ETCD_ENDPOINTS=" + srv.Endpoint, "EXTAUTHZ_RULES_ETCD_KEYS=" + key,
		"EXTAUTHZ_SENTINEL_DASHBOARD_COMMAND_ADDR=127.0.0.1:0", "EXTAUTHZ_SENTINEL_DASHBOARD_ALLOWED_CALLERS=127.0.0.1",
		"EXTAUTHZ_PARAM_NAMES=item_id"}
	args := []string{"serve", "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	a := testbin.Start(t, testbin.Options{Binary: binary(t), Env: env, Args: args})
	b := testbin.Start(t, testbin.Options{Binary: binary(t), Env: env, Args: args})
	rlB := rlsv3.NewRateLimitServiceClient(dial(t, b.GRPCAddr))
	for i := range 3 {
		if got := rateLimit(t, rlB, "POST:/order", "sku-1"); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("replica b, call %d before the push: %v", i, got)
		}
	}

	bad := url.Values{"data": {`[{"resource":"POST:/order","paramIdx":0,"count":1},{"resource":"POST:/cart","paramIdx":3,"count":1}]`}}
	if code, body := command(t, commandAddr(t, a), "setParamFlowRules", bad, true); code != http.StatusBadRequest || !strings.Contains(body, "paramIdx") {
		t.Fatalf("a set with a bad rule = %d %q, want 400 naming paramIdx", code, body)
	}
	good := url.Values{"data": {`[{"resource":"POST:/order","limitApp":"default","grade":1,"paramIdx":0,"count":1,"durationInSec":60,"controlBehavior":0,"burstCount":0,"maxQueueingTimeMs":0,"paramFlowItemList":[],"clusterMode":false,"regex":false}]`}}
	if code, body := command(t, commandAddr(t, a), "setParamFlowRules", good, true); code != 200 || body != "success" {
		t.Fatalf("push to replica a = %d %q", code, body)
	}
	a.WaitLog(t, "dashboard push applied", 5*time.Second)
	if e := a.Entry("dashboard push applied"); !strings.Contains(fmt.Sprint(e["to"]), key) || fmt.Sprint(e["rules_before"]) != "[]" {
		t.Errorf("the push's log line %v, want the etcd key", e)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := cli.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 || !strings.Contains(string(got.Kvs[0].Value), `"paramFlowRules":[`) || !strings.Contains(string(got.Kvs[0].Value), `"limitApp":"serviceA"`) {
		t.Fatalf("etcd key after the push: %v %v, want the pushed list beside the authority rule kept", got, err)
	}
	eventually(t, "replica b enforcing the pushed rule", func() bool {
		return rateLimit(t, rlB, "POST:/order", "sku-2") == rlsv3.RateLimitResponse_OVER_LIMIT
	})
	// and replica b's dashboard view reads the rule back with its paramIdx
	if code, body := command(t, commandAddr(t, b), "getParamFlowRules", url.Values{}, false); code != 200 || !strings.Contains(body, `"count":1,"durationInSec":60`) || !strings.Contains(body, `"paramIdx":0`) {
		t.Fatalf("replica b's getParamFlowRules = %d %s", code, body)
	}
}
