package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// t0 is the fixed instant the semantic tests start from; the store sends the test's instant to
// the script instead of reading the Redis clock. Keys expire at instants of the script's clock,
// so t0 is far in the future: no key expires in real time while a test runs.
var t0 = time.Date(2099, 3, 4, 5, 6, 7, 0, time.UTC)

// fakeClock is a test's clock. Its get may be called from other goroutines (a booking's timer)
// while the test sets it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) set(d time.Duration) {
	c.mu.Lock()
	c.now = t0.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) get() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// setReal sets the clock to the real time, for tests of the keys' expiry in Redis.
func (c *fakeClock) setReal() {
	c.mu.Lock()
	c.now = time.Now()
	c.mu.Unlock()
}

// newTestStore starts a redis-server and a Store on it whose clock is the returned fake.
func newTestStore(t *testing.T) (*Store, *redistest.Server, *fakeClock) {
	t.Helper()
	srv := redistest.Start(t)
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	clk := &fakeClock{now: t0}
	s.clock = func() time.Time { return clk.now }
	return s, srv, clk
}

// openStore is New(cfg), closed when t ends; an error ends t.
func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func eval(t *testing.T, s *Store, ops ...hotparam.RemoteOp) []hotparam.RemoteResult {
	t.Helper()
	res := make([]hotparam.RemoteResult, len(ops))
	if err := s.Eval(context.Background(), ops, res); err != nil {
		t.Fatalf("Eval: %v", err)
	}
	return res
}

// step is one call of a single op at an instant, with the answer it must get.
type step struct {
	at   time.Duration // since t0
	hits int64
	rel  bool
	want hotparam.RemoteResult
}

func runSteps(t *testing.T, s *Store, clk *fakeClock, op hotparam.RemoteOp, steps []step) {
	t.Helper()
	for i, st := range steps {
		clk.set(st.at)
		o := op
		o.Hits = st.hits
		o.Release = st.rel
		got := eval(t, s, o)[0]
		got.Turn = hotparam.Turn{} // where a turn ends: see unhold_test.go
		if got != st.want {
			t.Errorf("step %d (t0+%v hits %d release %v): got %+v, want %+v", i, st.at, st.hits, st.rel, got, st.want)
		}
	}
}

func ok(rem int64, reset, retry, wait time.Duration) hotparam.RemoteResult {
	return hotparam.RemoteResult{Allowed: true, Remaining: rem, ResetAfter: reset, RetryAfter: retry, Wait: wait}
}

func no(rem int64, reset, retry time.Duration) hotparam.RemoteResult {
	return hotparam.RemoteResult{Remaining: rem, ResetAfter: reset, RetryAfter: retry}
}
