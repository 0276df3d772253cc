package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// serverEvents records what a Store reports through OnServer.
type serverEvents struct {
	mu  sync.Mutex
	all []ServerEvent
}

func (se *serverEvents) add(e ServerEvent) {
	se.mu.Lock()
	defer se.mu.Unlock()
	se.all = append(se.all, e)
}

func (se *serverEvents) of(k ServerEventKind) []ServerEvent {
	se.mu.Lock()
	defer se.mu.Unlock()
	var out []ServerEvent
	for _, e := range se.all {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// healthStore is a Store on srv that samples INFO every 20ms, its server events recorded,
// without the cache of blocked values (so that every call shows what Redis holds).
func healthStore(t *testing.T, srv *redistest.Server, run bool) (*Store, *serverEvents) {
	t.Helper()
	ev := &serverEvents{}
	st, err := NewWithOptions(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BlockedCache: -1,
		BreakerCooldown: 20 * time.Millisecond, SampleInterval: 20 * time.Millisecond}, Options{OnServer: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { st.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	return st, ev
}

// Check reads the policy, the limit and the persistence: from CONFIG, or from INFO when the
// server refuses CONFIG (as managed services do).
func TestCheckPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		policy string
		from   string
		max    int64
		aof    bool
	}{
		{"default", nil, "noeviction", "config", 0, false},
		{"allkeys-lru", []string{"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"}, "allkeys-lru", "config", 4 << 20, false},
		{"aof", []string{"--maxmemory-policy", "volatile-ttl", "--appendonly", "yes"}, "volatile-ttl", "config", 0, true},
		{"config refused", []string{"--maxmemory", "8mb", "--maxmemory-policy", "allkeys-random",
			"--user", "default", "on", "nopass", "~*", "&*", "+@all", "-config"}, "allkeys-random", "info", 8 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			st, _ := healthStore(t, srv, false)
			infos, err := st.Check(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) != 1 {
				t.Fatalf("%d servers, want 1", len(infos))
			}
			in := infos[0]
			if in.Policy != tc.policy || in.PolicyFrom != tc.from || in.MaxMemory != tc.max || in.AOF != tc.aof ||
				!in.Master || in.RunID == "" || in.Addr != srv.Addr() {
				t.Errorf("Check = %+v; want policy %s from %s, maxmemory %d, aof %v, a master with a run id at %s",
					in, tc.policy, tc.from, tc.max, tc.aof, srv.Addr())
			}
			if Evicts(in.Policy) != (tc.policy != "noeviction") {
				t.Errorf("Evicts(%q) = %v", in.Policy, Evicts(in.Policy))
			}
		})
	}
}

// A Redis with maxmemory and allkeys-lru deletes the key of a depleted value when other keys
// need the room: the value gets its full count again. The store counts every key Redis
// evicted (the same number as INFO's evicted_keys) and reports the evictions starting once,
// and stopping once.
func TestEvictionCounted(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	st, ev := healthStore(t, srv, true)
	if _, err := st.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	victim := hotparam.RemoteOp{RuleID: "few", Value: "victim", Count: 2, Duration: time.Hour, Hits: 1}
	for i, want := range []bool{true, true, false} {
		if got := evalOne(t, st, victim).Allowed; got != want {
			t.Fatalf("victim call %d: allowed %v, want %v", i, got, want)
		}
	}
	// Redis's LRU clock counts whole seconds: keys touched in the same second are as old as
	// each other. Once the victim's key has been idle a second on it, every key the fill
	// writes is younger.
	vk := st.keys([]hotparam.RemoteOp{victim})[0]
	waitFor(t, "the victim's key idle a second on Redis's LRU clock", func() bool {
		n, err := strconv.Atoi(srv.CLI("OBJECT", "IDLETIME", vk))
		return err == nil && n >= 1
	})
	fill(t, srv, 16<<20)
	evicted, _ := strconv.ParseUint(srv.Info("evicted_keys"), 10, 64)
	if evicted == 0 {
		t.Fatal("Redis evicted nothing: the test does not test eviction")
	}
	if srv.CLI("EXISTS", vk) != "0" {
		t.Fatal("the depleted value's key survived the fill: the test does not test eviction")
	}
	if !evalOne(t, st, victim).Allowed {
		t.Error("the depleted value refused after its key was evicted: eviction did not reset it")
	}
	// the call above may have evicted more: compare with what Redis says at the time
	waitFor(t, "every eviction counted", func() bool {
		evicted, _ = strconv.ParseUint(srv.Info("evicted_keys"), 10, 64)
		return st.Stats().EvictedKeys == evicted
	})
	waitFor(t, "evictions reported as stopped", func() bool { return len(ev.of(EvictingStopped)) == 1 })
	if got := ev.of(Evicting); len(got) != 1 || got[0].Evicted == 0 || got[0].Info.Policy != "allkeys-lru" {
		t.Errorf("Evicting reported %+v, want once, with keys and the policy", got)
	}
	if got := ev.of(EvictingStopped)[0]; got.Evicted != evicted {
		t.Errorf("EvictingStopped counted %d keys, want %d", got.Evicted, evicted)
	}
	if got := ev.of(PolicyEvicts); len(got) != 0 {
		t.Errorf("PolicyEvicts reported %d times after Check, want 0 (Check's caller reports it)", len(got))
	}
}

// A Redis restarted empty: the next sample counts a restart and reports it once.
func TestRestartCounted(t *testing.T) {
	srv := redistest.Start(t)
	st, ev := healthStore(t, srv, true)
	if _, err := st.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := srv.Info("run_id")
	srv.Kill()
	srv.Restart()
	if srv.Info("run_id") == before {
		t.Fatal("run_id did not change across a restart")
	}
	waitFor(t, "the restart counted", func() bool { return st.Stats().Restarts == 1 })
	waitSamples(t, srv, 2)
	if got := ev.of(Restarted); len(got) != 1 || st.Stats().Restarts != 1 {
		t.Errorf("Restarted reported %d times, counted %d; want 1 and 1", len(got), st.Stats().Restarts)
	}
}

// A policy that evicts, not seen by Check (Redis not reachable at start, or changed later), is
// reported by the samples once.
func TestPolicyChangeReported(t *testing.T) {
	srv := redistest.Start(t)
	st, ev := healthStore(t, srv, true)
	if _, err := st.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.CLI("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
	waitFor(t, "the evicting policy reported", func() bool { return len(ev.of(PolicyEvicts)) == 1 })
	waitSamples(t, srv, 2)
	if got := ev.of(PolicyEvicts); len(got) != 1 || got[0].Info.Policy != "allkeys-lfu" {
		t.Errorf("PolicyEvicts = %+v, want once, allkeys-lfu", got)
	}
}

// waitSamples waits until Run has taken n whole samples of srv after the call: each sample
// reads INFO then CONFIG GET, and a sample starts once the one before has reported, so n+1
// CONFIG GETs seen by srv mean n samples done (the last one may still be under way).
func waitSamples(t *testing.T, srv *redistest.Server, n int) {
	t.Helper()
	before := srv.CommandCalls("config|get")
	waitFor(t, strconv.Itoa(n)+" more samples", func() bool { return srv.CommandCalls("config|get") >= before+n+1 })
}

func TestInfoFields(t *testing.T) {
	f := infoFields("# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n\r\n# Memory\r\nmaxmemory_policy:noeviction\r\nbad line\r\n")
	if f["run_id"] != "abc" || f["maxmemory_policy"] != "noeviction" || f["redis_version"] != "7.0.15" || len(f) != 3 {
		t.Errorf("infoFields = %v", f)
	}
	var b strings.Builder
	for i := range 5000 {
		b.WriteString("k" + strconv.Itoa(i) + ":v\n")
	}
	if n := len(infoFields(b.String())); n != maxInfoFields {
		t.Errorf("infoFields kept %d fields of 5000, want the bound %d", n, maxInfoFields)
	}
}

func evalOne(t *testing.T, st *Store, op hotparam.RemoteOp) hotparam.RemoteResult {
	t.Helper()
	res := make([]hotparam.RemoteResult, 1)
	if err := st.Eval(context.Background(), []hotparam.RemoteOp{op}, res); err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// fill writes n bytes of other keys into srv, 64 KiB a key.
func fill(t *testing.T, srv *redistest.Server, n int) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	value := strings.Repeat("x", 64<<10)
	ctx := context.Background()
	for i := range n / len(value) {
		if err := c.Do(ctx, c.B().Set().Key("filler:"+strconv.Itoa(i)).Value(value).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}
