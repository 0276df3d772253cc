package redisstore

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// twoStores returns a store with the cache of blocked values and one without, on one Redis, both
// on the returned clock.
func twoStores(t *testing.T, size int) (cached, direct *Store, srv *redistest.Server, clk *fakeClock) {
	t.Helper()
	cached, srv, clk = newTestStore(t)
	cached.blk = newBlocked(size)
	direct, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BlockedCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	direct.clock = func() time.Time { return clk.now }
	return cached, direct, srv, clk
}

// Random calls through the cached store: whenever it refuses, from its cache or not, Redis
// asked directly at the same instant refuses with the same answer (a refusal consumes nothing,
// so asking again changes nothing). The cache never admits: admissions all come from Redis.
func TestBlockedCacheAnswersAsRedis(t *testing.T) {
	cached, direct, srv, clk := twoStores(t, DefaultBlockedCache)
	rng := rand.New(rand.NewPCG(3, 5))
	rules := []hotparam.RemoteOp{
		{RuleID: "b", Count: 3, Burst: 1, Duration: time.Second},
		{RuleID: "b2", Count: 2, Duration: 10 * time.Second},
		{RuleID: "t", Behavior: hotparam.Throttle, Count: 5, Duration: time.Second, MaxWait: 300 * ms},
	}
	at, refused, fromCache := time.Duration(0), 0, 0
	for step := range 600 {
		at += time.Duration(rng.Int64N(int64(60 * ms)))
		clk.set(at)
		op := rules[rng.IntN(len(rules))]
		op.Value = "v" + strconv.Itoa(rng.IntN(3))
		op.Hits = 1
		if rng.IntN(4) == 0 {
			op.Hits = 1 + rng.Int64N(3)
		}
		if op.Behavior == hotparam.Throttle {
			op.MaxWait = time.Duration(rng.Int64N(int64(300 * ms)))
		}
		before := cached.Stats().Calls
		got := eval(t, cached, op)[0]
		hit := cached.Stats().Calls == before
		if got.Allowed {
			if hit {
				t.Fatalf("step %d: admitted without Redis", step)
			}
			continue
		}
		refused++
		if hit {
			fromCache++
		}
		if want := eval(t, direct, op)[0]; got != want {
			t.Fatalf("step %d (%+v at t0+%v, from the cache %v): got %+v, Redis answers %+v", step, op, at, hit, got, want)
		}
	}
	if st := cached.Stats(); fromCache == 0 || st.CacheHits != uint64(fromCache) {
		t.Errorf("refusals from the cache: %d (Stats.CacheHits %d) of %d refusals: want some, counted", fromCache, st.CacheHits, refused)
	}
	if got, want := srv.CommandCalls("evalsha")+srv.CommandCalls("eval"), cached.Stats().RoundTrips+direct.Stats().RoundTrips; uint64(got) != want {
		t.Errorf("scripts run on the server: %d, script calls sent: %d", got, want)
	}
	t.Logf("%d refusals, %d from the cache", refused, fromCache)
}

func TestBlockedCache(t *testing.T) {
	bucket := hotparam.RemoteOp{RuleID: "bc", Count: 1, Duration: time.Hour, Hits: 1}

	t.Run("a refused value is refused again without Redis until it may pass", func(t *testing.T) {
		s, srv, clk := newTestStore(t)
		op := bucket
		op.Value = "hot"
		clk.set(0)
		eval(t, s, op)
		if eval(t, s, op)[0].Allowed {
			t.Fatal("second of one per hour allowed")
		}
		calls := srv.CommandCalls("evalsha")
		clk.set(time.Minute)
		if got, want := eval(t, s, op)[0], no(0, 59*time.Minute, 59*time.Minute); got != want {
			t.Errorf("from the cache: got %+v, want %+v", got, want)
		}
		if got := srv.CommandCalls("evalsha"); got != calls {
			t.Errorf("EVALSHA calls: got %d, want %d (none for a cached refusal)", got, calls)
		}
		clk.set(time.Hour)
		if !eval(t, s, op)[0].Allowed {
			t.Error("after an hour: refused")
		}
	})

	t.Run("an acquisition that takes the last token is kept as a refusal until the next", func(t *testing.T) {
		cached, direct, srv, clk := twoStores(t, DefaultBlockedCache)
		op := bucket
		op.Count, op.Value = 2, "emptied"
		clk.set(0)
		eval(t, cached, op)
		clk.set(10 * time.Minute)
		if !eval(t, cached, op)[0].Allowed { // takes the last token
			t.Fatal("second of two per hour refused")
		}
		calls := srv.CommandCalls("evalsha")
		clk.set(20 * time.Minute)
		got := eval(t, cached, op)[0]
		if srv.CommandCalls("evalsha") != calls || cached.Stats().CacheHits != 1 {
			t.Fatalf("the call after the last token went to Redis")
		}
		// a third of a token left at 10 minutes: the next is there at 30, the bucket full at 60
		if want := eval(t, direct, op)[0]; got != want || want != no(0, 40*time.Minute, 10*time.Minute) {
			t.Errorf("from the cache: %+v; Redis: %+v; want %+v", got, want, no(0, 40*time.Minute, 10*time.Minute))
		}
		clk.set(30 * time.Minute)
		if !eval(t, cached, op)[0].Allowed {
			t.Error("refused when the next token is there")
		}
	})

	t.Run("a call in the span its token may be back in waits it out, then goes to Redis", func(t *testing.T) {
		b := newBlocked(10)
		op := bucket
		r := hotparam.RemoteResult{RetryAfter: time.Second, ResetAfter: time.Hour}
		b.add("k", &op, &r, t0, t0.Add(300*time.Microsecond)) // answered 300us after it was sent
		until := t0.Add(time.Second)
		for _, c := range []struct {
			at   time.Time
			want time.Duration
		}{
			{until.Add(-time.Microsecond), 0}, // refused from the cache instead
			{until, 300 * time.Microsecond},
			{until.Add(100 * time.Microsecond), 200 * time.Microsecond},
			{until.Add(300 * time.Microsecond), 0},
		} {
			if got := b.hold("k", &op, c.at); got != c.want {
				t.Errorf("hold at until%+v: got %v, want %v", c.at.Sub(until), got, c.want)
			}
		}
		other := op
		other.Count = 2
		if got := b.hold("k", &other, until); got != 0 {
			t.Errorf("hold of another rule's numbers: got %v, want 0", got)
		}
		b.add("slow", &op, &r, t0, t0.Add(time.Second)) // a slow answer holds no longer than maxHold
		if got := b.hold("slow", &op, until); got != maxHold {
			t.Errorf("hold after a one-second answer: got %v, want %v", got, maxHold)
		}

		s, srv, clk := newTestStore(t)
		op.Value = "held"
		k := key(DefaultPrefix, &op)
		s.blk.add(k, &op, &r, t0, t0.Add(time.Millisecond))
		clk.set(time.Second + 500*time.Microsecond)
		calls := srv.CommandCalls("evalsha") + srv.CommandCalls("eval")
		if !eval(t, s, op)[0].Allowed {
			t.Error("refused after the hold (the bucket is full in Redis)")
		}
		if st := s.Stats(); st.Held != 1 || srv.CommandCalls("evalsha")+srv.CommandCalls("eval") == calls {
			t.Errorf("held %d calls, script calls %d: want the call held once, then sent", st.Held,
				srv.CommandCalls("evalsha")+srv.CommandCalls("eval")-calls)
		}
	})

	t.Run("a caller that read its clock before the entry's call started is answered as of that start", func(t *testing.T) {
		b := newBlocked(10)
		op := bucket
		r := hotparam.RemoteResult{RetryAfter: time.Hour, ResetAfter: time.Hour}
		b.add("k", &op, &r, t0.Add(time.Millisecond), t0.Add(2*time.Millisecond))
		got, ok := b.lookup("k", &op, t0) // read a millisecond before the call that made the entry
		if !ok || got.RetryAfter != time.Hour || got.ResetAfter != time.Hour {
			t.Errorf("got %+v (%v), want refused, retry and reset after an hour, no later than Redis said", got, ok)
		}
	})

	t.Run("only requests it knows: more hits, a changed count, a release go to Redis", func(t *testing.T) {
		s, srv, clk := newTestStore(t)
		op := bucket
		op.Value = "known"
		clk.set(0)
		eval(t, s, op)
		eval(t, s, op) // refused, kept
		calls := srv.CommandCalls("evalsha")
		more := op
		more.Hits = 2
		eval(t, s, more)
		higher := op
		higher.Count = 2
		eval(t, s, higher)
		if got := srv.CommandCalls("evalsha") - calls; got != 2 {
			t.Errorf("EVALSHA calls: got %d, want 2", got)
		}
	})

	t.Run("a refund through this replica drops the entry", func(t *testing.T) {
		s, _, clk := newTestStore(t)
		op := bucket
		op.Value, op.Refund, op.LeaseID = "refund", true, "a"
		clk.set(0)
		eval(t, s, op)
		op.LeaseID = "b"
		eval(t, s, op) // refused, kept
		rel := op
		rel.Release, rel.LeaseID = true, "a"
		eval(t, s, rel)
		op.LeaseID = "c"
		if !eval(t, s, op)[0].Allowed {
			t.Error("after the refund of a: refused")
		}
	})

	t.Run("a refund on another replica: refused until the entry ends, never admitted", func(t *testing.T) {
		cached, direct, _, clk := twoStores(t, DefaultBlockedCache)
		op := bucket
		op.Value, op.Refund, op.LeaseID = "other", true, "a"
		clk.set(0)
		eval(t, cached, op)
		op.LeaseID = "b"
		eval(t, cached, op) // refused, kept
		rel := op
		rel.Release, rel.LeaseID = true, "a"
		eval(t, direct, rel) // the token is back in Redis
		op.LeaseID = "c"
		if eval(t, cached, op)[0].Allowed {
			t.Error("the cache admitted")
		}
		if !eval(t, direct, op)[0].Allowed {
			t.Error("Redis refused after the refund")
		}
	})

	t.Run("bounded", func(t *testing.T) {
		s, _, clk := newTestStore(t)
		s.blk = newBlocked(3)
		clk.set(0)
		for i := range 10 {
			op := bucket
			op.Value = "many-" + strconv.Itoa(i)
			eval(t, s, op)
			eval(t, s, op)
		}
		if got := s.Stats().Cached; got != 3 {
			t.Errorf("entries: got %d, want 3", got)
		}
	})

	t.Run("off", func(t *testing.T) {
		_, direct, srv, clk := twoStores(t, 1)
		op := bucket
		op.Value = "off"
		clk.set(0)
		eval(t, direct, op)
		eval(t, direct, op)
		calls := srv.CommandCalls("evalsha")
		eval(t, direct, op)
		if srv.CommandCalls("evalsha") != calls+1 || direct.Stats().CacheHits != 0 {
			t.Error("BlockedCache -1: a refusal answered without Redis")
		}
	})
}
