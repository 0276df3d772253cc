package monitoring

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/deploy/internal/service"
)

func TestMain(m *testing.M) {
	code := m.Run()
	service.Cleanup()
	os.Exit(code)
}

// liveConfig is the service's config for the live test: a real Redis (killed halfway, so
// that calls fail, the breaker opens and stays open, and cluster rules fall back to local
// counts) and the mapping of the traffic below.
const liveConfig = `
rules_file: %s
store:
  redis:
    addrs: ["%s"]
    # Generous, so that a loaded machine's slow answers are not failures.
    timeout: 1s
    breaker_failures: 3
    # While Redis is dead, the probe every 2s fails and the breaker stays open.
    breaker_cooldown: 2s
    fallback: local
authz:
  resource: "{method}:{path}"
  origin:
    - {from: header, name: x-origin}
  params:
    item_id: {from: header, name: x-item}
ratelimit:
  resource_key: resource
  origin_key: origin
# The orders of a round hold 5 at once; the bulk burst holds 6, and refuses the rest.
decision:
  max_waiting: 6
`

// liveRules block on every path the dashboard shows: an authority white list, a per-item
// limit on a rule whose capacity is 2 (so distinct items evict each other), throttled rules
// (queue waits, and full queues), a cluster rule (Redis calls and fallbacks) and a shadow rule.
const liveRules = `
authority:
  - resource: "GET:/items"
    strategy: white
    origins: [web]
param_flow:
  - resource: "GET:/items"
    param: item_id
    grade: qps
    count: 1
    duration: 1h
    capacity: 2
  - resource: "POST:/orders"
    param: user
    grade: qps
    count: 10
    duration: 1s
    behavior: throttle
    max_queueing_time: 2s
  - resource: "POST:/bulk"
    param: user
    grade: qps
    count: 5
    duration: 1s
    behavior: throttle
    max_queueing_time: 2s
  - resource: "GET:/search"
    param: user
    grade: qps
    count: 1000
    duration: 1s
    cluster: true
  - resource: "GET:/search"
    param: q
    grade: qps
    count: 1
    duration: 1h
    shadow: true
`

// TestPackAgainstBinary runs the built service with liveRules, sends it known traffic over
// gRPC, has a real Prometheus scrape it and load alerts.yaml, and evaluates every dashboard
// query and every alert expression: each must return data. The traffic is made so that each
// alert's condition holds (a rejected reload, the breaker open, fallbacks, evictions, slow
// throttled answers, full queues), so that the alert expressions return series too, and Prometheus must
// report each alert pending or firing.
func TestPackAgainstBinary(t *testing.T) {
	promPath := tool(t, "prometheus")
	path := service.Binary(t)
	dir := t.TempDir()

	rulesFile := filepath.Join(dir, "rules.yaml")
	writeAtomic(t, rulesFile, liveRules)
	cfgFile := filepath.Join(dir, "extauthz.yaml")
	redis := service.StartRedis(t)
	writeAtomic(t, cfgFile, fmt.Sprintf(liveConfig, rulesFile, redis.Addr))
	proc := service.Start(t, path, "serve", "--config", cfgFile, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")

	// The store connects in the background: wait for it, so that the first round's calls
	// reach Redis.
	proc.WaitMetric(t, "extauthz_redis_breaker_open 0")

	prom := startPrometheus(t, promPath, proc.AdminAddr)
	prom.waitFor(t, `up{job="extauthz"} == 1`, 30*time.Second)

	conn, err := grpc.NewClient(proc.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tr := traffic{t: t, authz: authv3.NewAuthorizationClient(conn), rl: rlsv3.NewRateLimitServiceClient(conn)}

	// Rounds of calls, each seen by a scrape of its own, so that every counter moves between
	// samples and its rate is above 0. The first with Redis up.
	tr.round(0)
	prom.waitFor(t, fmt.Sprintf(`sum(extauthz_decisions_total) == %d`, tr.sent), 30*time.Second)
	prom.waitFor(t, `extauthz_redis_calls_total{result="ok"} > 0`, 30*time.Second)

	// A good reload (the rules version changes) between the rounds.
	writeAtomic(t, rulesFile, liveRules+`
  - resource: "GET:/extra"
    param: user
    grade: qps
    count: 5
    duration: 1s
`)
	prom.waitFor(t, `extauthz_rules_version > 1`, 30*time.Second)

	// Redis dies: the next two rounds are answered by the local fallback, the breaker open.
	redis.Kill()
	tr.round(1)
	prom.waitFor(t, fmt.Sprintf(`sum(extauthz_decisions_total) == %d`, tr.sent), 30*time.Second)
	prom.waitFor(t, `extauthz_redis_breaker_open == 1`, 30*time.Second)
	tr.round(2)
	prom.waitFor(t, fmt.Sprintf(`sum(extauthz_decisions_total) == %d`, tr.sent), 30*time.Second)

	// Then a bad one: rejected, the rules in force stay.
	writeAtomic(t, rulesFile, "param_flow:\n  - resource: x\n    grade: nonsense\n")
	prom.waitFor(t, `extauthz_rules_last_load_success == 0`, 30*time.Second)

	d := loadDashboard(t)
	queries := append(dashboardQueries(t, d), alertQueries(t)...)
	for _, q := range queries {
		expr := grafanaVars.Replace(q.expr)
		res, err := prom.query(expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, expr)
			continue
		}
		if len(res) == 0 {
			t.Errorf("%s returned no data:\n%s", q.where, expr)
			continue
		}
		if !anyNumber(res) {
			t.Errorf("%s returned only NaN: %v\n%s", q.where, res, expr)
		}
	}
	if n := len(queries); n < 30 {
		t.Errorf("evaluated %d queries; the dashboard and alerts hold more", n)
	}

	// Prometheus loaded alerts.yaml itself and holds every alert active.
	want := map[string]bool{}
	for _, q := range alertQueries(t) {
		want[strings.TrimPrefix(q.where, "alert ")] = true
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		active, err := prom.activeAlerts()
		missing := []string{}
		for name := range want {
			if !active[name] {
				missing = append(missing, name)
			}
		}
		if err == nil && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts not pending or firing in Prometheus: %v (err %v)", missing, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// traffic sends the test's calls and counts them.
type traffic struct {
	t     *testing.T
	authz authv3.AuthorizationClient
	rl    rlsv3.RateLimitServiceClient
	sent  int
}

// round sends one round of calls; n makes its item, query and user values its own, so that
// each round evicts and blocks anew.
func (tr *traffic) round(n int) {
	t := tr.t
	// ext_authz: allowed and authority-blocked origins, then items past the capacity of 2
	// (each a first sight: allowed, and evicting an older item) and one item twice (blocked:
	// 1 an hour).
	tr.check("web", "", codes.OK)
	tr.check("mobile", "", codes.PermissionDenied)
	for i := range 4 {
		// A first sight is allowed, unless both of its cells in the rule's flood sketch hold
		// depleted items evicted earlier (hotparam/flood.go: with a capacity of 2 the sketch is
		// small and this happens now and then); either way it evicts an older item.
		tr.check("web", fmt.Sprintf("r%d-item%d", n, i), codes.OK, codes.PermissionDenied)
	}
	tr.check("web", fmt.Sprintf("r%d-item3", n), codes.PermissionDenied)

	// ratelimit: 6 orders of one user at once against 10 a second: all through, the later
	// ones held up to 500ms (queue waits, slow answers).
	var wg sync.WaitGroup
	codesSeen := make([]rlsv3.RateLimitResponse_Code, 6)
	for i := range codesSeen {
		wg.Go(func() {
			codesSeen[i] = tr.rateLimit([2]string{"resource", "POST:/orders"}, [2]string{"user", fmt.Sprintf("u%d", n)})
		})
	}
	wg.Wait()
	tr.sent += len(codesSeen)
	for i, c := range codesSeen {
		if c != rlsv3.RateLimitResponse_OK {
			t.Errorf("order %d: %v, want OK after a throttle wait", i, c)
		}
	}
	// A bulk burst of 12 at once against 5 a second: the first passes, 6 are held (200ms to
	// 1.2s apart, decision.max_waiting), and those that come while 6 wait are refused
	// (queue_full). The held ones leave 200ms apart, so the burst's stragglers may be held too:
	// at least one refusal, never more than 5.
	bulk := make([]rlsv3.RateLimitResponse_Code, 12)
	for i := range bulk {
		wg.Go(func() {
			bulk[i] = tr.rateLimit([2]string{"resource", "POST:/bulk"}, [2]string{"user", fmt.Sprintf("u%d", n)})
		})
	}
	wg.Wait()
	tr.sent += len(bulk)
	refused := 0
	for _, c := range bulk {
		if c == rlsv3.RateLimitResponse_OVER_LIMIT {
			refused++
		}
	}
	if refused < 1 || refused > 5 {
		t.Errorf("bulk burst: %d of 12 refused, want 1 to 5 (queue_full)", refused)
	}
	// The cluster rule: counted in Redis, or by the local fallback once Redis fails.
	for range 5 {
		if c := tr.rateLimit([2]string{"resource", "GET:/search"}, [2]string{"user", "u"}); c != rlsv3.RateLimitResponse_OK {
			t.Errorf("search by user: %v, want OK", c)
		}
		tr.sent++
	}
	// The shadow rule: the second query is over its limit, and let through.
	for range 2 {
		if c := tr.rateLimit([2]string{"resource", "GET:/search"}, [2]string{"q", fmt.Sprintf("r%d", n)}); c != rlsv3.RateLimitResponse_OK {
			t.Errorf("shadowed search: %v, want OK", c)
		}
		tr.sent++
	}
}

func (tr *traffic) check(origin, item string, want ...codes.Code) {
	t := tr.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	headers := map[string]string{"x-origin": origin}
	if item != "" {
		headers["x-item"] = item
	}
	resp, err := tr.authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 5555}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: "/items", Host: "example.com", Headers: headers,
		}},
	}})
	if err != nil {
		t.Fatalf("Check from %q item %q: %v", origin, item, err)
	}
	tr.sent++
	if got := codes.Code(resp.GetStatus().GetCode()); !slices.Contains(want, got) {
		t.Errorf("Check from %q item %q: %v, want one of %v", origin, item, got, want)
	}
}

func (tr *traffic) rateLimit(entries ...[2]string) rlsv3.RateLimitResponse_Code {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &rlcommon.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	resp, err := tr.rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "extauthz", Descriptors: []*rlcommon.RateLimitDescriptor{d}, HitsAddend: 1})
	if err != nil {
		tr.t.Errorf("ShouldRateLimit %v: %v", entries, err)
		return rlsv3.RateLimitResponse_UNKNOWN
	}
	return resp.GetOverallCode()
}

// writeAtomic replaces path with body by a rename, as an editor or the kubelet would.
func writeAtomic(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
