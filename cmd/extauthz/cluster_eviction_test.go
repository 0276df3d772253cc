package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

const (
	logPolicyEvicts = "redis maxmemory-policy evicts keys: a cluster rule's value whose key is evicted gets its full count again; set noeviction (or store.redis.require_noeviction to refuse this)"
	logEvictingKeys = "redis is evicting keys: values of cluster rules may get their full count again"
	logRestarted    = "redis restarted: the state of cluster rules it held is lost unless it persisted it"
)

// evictionService starts extauthz on srv with a cluster rule on POST:/few (2 an hour),
// sampling INFO every 100ms, without the cache of blocked values (every call shows what
// Redis holds), and env.
func evictionService(t *testing.T, srv *redistest.Server, env ...string) (*testbin.Options, string) {
	t.Helper()
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/few", param: item_id, grade: qps, count: 2, duration: 1h, cluster: true}
`)
	cfg := writeFile(t, dir, "extauthz.yaml", fmt.Sprintf(`
store:
  redis:
    addrs: ["%s"]
    timeout: 1s
    fallback: deny
    breaker_cooldown: 100ms
    sample_interval: 100ms
    blocked_cache: -1
`, srv.Addr()))
	return &testbin.Options{Binary: binary(t), Dir: dir, Env: env,
		Args: []string{"--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}}, dir
}

// store.redis.require_noeviction refuses to start on a Redis whose policy evicts, naming the
// server, its policy and the way out; without it the service starts and warns once.
func TestBinaryRedisRequireNoeviction(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	o, _ := evictionService(t, srv, "EXTAUTHZ_STORE_REDIS_REQUIRE_NOEVICTION=true")
	p, err := testbin.Run(*o)
	if err == nil {
		p.Kill()
		t.Fatal("extauthz served on an evicting Redis with require_noeviction")
	}
	for _, want := range []string{"store.redis.require_noeviction", srv.Addr(), "allkeys-lru", "noeviction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start error does not name %q:\n%v", want, err)
		}
	}
	o, _ = evictionService(t, srv)
	p = testbin.Start(t, *o)
	p.WaitLog(t, logPolicyEvicts, 5*time.Second)
	if e := p.Entry(logPolicyEvicts); e["maxmemory_policy"] != "allkeys-lru" || e["maxmemory"] != float64(4<<20) {
		t.Errorf("%q logged as %v, want the policy and the limit", logPolicyEvicts, e)
	}
	if e := p.Entry("redis store"); e["maxmemory_policy"] != "allkeys-lru" || e["policy_from"] != "config" {
		t.Errorf("redis store logged as %v", e)
	}
}

// Redis with maxmemory and allkeys-lru evicts a depleted value's key when other keys need the
// room, and the value gets its full count again: the service counts every evicted key (the
// metric equals INFO's evicted_keys) and logs the evictions once. A Redis restarted empty is
// counted and logged as a restart.
func TestBinaryRedisEvictionCounted(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	o, _ := evictionService(t, srv)
	p := testbin.Start(t, *o)
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	for i, w := range want {
		if got := code(t, c, "POST:/few", "victim"); got != w {
			t.Fatalf("victim call %d: %v, want %v", i, got, w)
		}
	}
	// Redis's LRU clock counts whole seconds: keys touched in the same second are as old as
	// each other, and the fill's keys might be evicted before the victim's. Once the victim's
	// key has been idle a second on that clock, every key the fill writes is younger.
	victim := strings.Fields(srv.CLI("--scan", "--pattern", "*{victim}*"))
	if len(victim) != 1 {
		t.Fatalf("the victim's keys in Redis: %q, want one", victim)
	}
	eventually(t, "the victim's key idle a second on Redis's LRU clock", func() bool {
		n, err := strconv.Atoi(srv.CLI("OBJECT", "IDLETIME", victim[0]))
		return err == nil && n >= 1
	})
	fillRedis(t, srv, 16<<20)
	evicted, _ := strconv.ParseFloat(srv.Info("evicted_keys"), 64)
	if evicted == 0 || srv.CLI("--scan", "--pattern", "*{victim}*") != "" {
		t.Fatalf("Redis evicted %v keys, the victim's key still there: the test does not test eviction", evicted)
	}
	if got := code(t, c, "POST:/few", "victim"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("the depleted value after its key was evicted: %v; eviction did not reset it (the harm counted here)", got)
	}
	eventually(t, "every evicted key counted", func() bool {
		// the call above may have evicted more: compare with what Redis says at the time
		evicted, _ = strconv.ParseFloat(srv.Info("evicted_keys"), 64)
		return metric(t, p, "extauthz_redis_evicted_keys_total") == evicted
	})
	p.WaitLog(t, logEvictingKeys, 5*time.Second)
	p.WaitLog(t, "redis stopped evicting keys", 5*time.Second)
	if n := countLogged(p, logEvictingKeys); n != 1 {
		t.Errorf("%q logged %d times, want once", logEvictingKeys, n)
	}

	srv.Kill()
	srv.Restart()
	p.WaitLog(t, logRestarted, 10*time.Second)
	if e := p.Entry(logRestarted); e["addr"] != srv.Addr() || e["aof"] != false {
		t.Errorf("%q logged as %v", logRestarted, e)
	}
	if n := metric(t, p, "extauthz_redis_restarts_total"); n != 1 {
		t.Errorf("extauthz_redis_restarts_total = %v, want 1", n)
	}
}

// fillRedis writes n bytes of other keys into srv, 64 KiB a key.
func fillRedis(t *testing.T, srv *redistest.Server, n int) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	value := strings.Repeat("x", 64<<10)
	for i := range n / len(value) {
		if err := c.Do(context.Background(), c.B().Set().Key("filler:"+strconv.Itoa(i)).Value(value).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}
