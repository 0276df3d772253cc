package redisstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// bookingStores returns a store that books ahead (BookAhead ahead) and one that keeps no cache,
// under another prefix (a bucket of its own for every value), on one Redis and the returned
// clock: the second is the bucket as it is without booking.
func bookingStores(t *testing.T, ahead time.Duration) (booked, ref *Store, srv *redistest.Server, clk *fakeClock) {
	t.Helper()
	srv = redistest.Start(t)
	clk = &fakeClock{now: t0}
	booked = openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BookAhead: ahead})
	ref = openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BlockedCache: -1, Prefix: "ref"})
	booked.clock = clk.get
	ref.clock = booked.clock
	return booked, ref, srv, clk
}

// On one replica, booking ahead changes no answer: random calls of a few values at random
// instants, many at once, through a store that books ahead get the answers, exactly (allowed,
// remaining, retry after, reset after), that the bucket without booking gives the same calls.
// Among them calls that end a booking, calls of two hits, probes and calls of two rules at once,
// which give the tokens left back first, and rules whose tokens come at instants that are not
// whole nanoseconds.
func TestBookingAnswersAsTheBucket(t *testing.T) {
	booked, ref, _, clk := bookingStores(t, 300*ms)
	rng := rand.New(rand.NewPCG(7, 11))
	rules := []hotparam.RemoteOp{
		{RuleID: "ten", Count: 10, Burst: 2, Duration: time.Second},
		{RuleID: "thirds", Count: 3, Burst: 1, Duration: time.Second},
		{RuleID: "odd", Count: 7, Burst: 3, Duration: 700 * ms},
	}
	at, admitted := time.Duration(0), 0
	for step := range 3000 {
		if rng.IntN(3) == 0 { // else another call at the same instant
			at += time.Duration(rng.Int64N(int64(40 * ms)))
			if rng.IntN(50) == 0 {
				at += time.Second // the value quiet for a while: its booking ends
			}
		}
		clk.set(at)
		op := rules[rng.IntN(len(rules))]
		op.Value = "v" + strconv.Itoa(rng.IntN(2))
		op.Hits = 1
		ops := []hotparam.RemoteOp{op}
		switch rng.IntN(40) {
		case 0:
			ops[0].Hits = 2
		case 1:
			ops[0].Probe = true
		case 2:
			at := slices.IndexFunc(rules, func(r hotparam.RemoteOp) bool { return r.RuleID == op.RuleID })
			other := rules[(rng.IntN(2)+1+at)%len(rules)]
			other.Value, other.Hits = op.Value, 1
			ops = append(ops, other)
		}
		got := eval(t, booked, ops...)
		want := eval(t, ref, ops...)
		for i := range ops {
			if got[i] != want[i] {
				t.Fatalf("step %d (t0+%v, %d ops, op %d %+v): booking ahead %+v, the bucket %+v (stats %+v)",
					step, at, len(ops), i, ops[i], got[i], want[i], booked.Stats())
			}
		}
		if got[0].Allowed {
			admitted++
		}
	}
	st := booked.Stats()
	if st.Booked == 0 || st.BookGiven == 0 || st.BookBack == 0 || st.BookLost != 0 {
		t.Errorf("stats %+v: want tokens booked, given out of bookings, some given back, none lost", st)
	}
	if st.Calls >= ref.Stats().Calls {
		t.Errorf("calls to Redis: %d booking ahead, %d without: want fewer", st.Calls, ref.Stats().Calls)
	}
	t.Logf("%d admitted; %d tokens booked, %d given out of bookings, %d given back; %d calls to Redis against %d",
		admitted, st.Booked, st.BookGiven, st.BookBack, st.Calls, ref.Stats().Calls)
}

// bookAt100ms empties op's bucket (a rule of 10 a second) at t0 in both stores, has one call
// refused at 50ms (the value hot here) and the token at 100ms taken, which books ahead.
func bookAt100ms(t *testing.T, booked, ref *Store, clk *fakeClock, op hotparam.RemoteOp) {
	t.Helper()
	emptyAt(t, booked, ref, clk, op, 0)
	refuseThenTake(t, booked, ref, clk, op, 50*ms)
}

// probeOf returns op as a probe: it takes nothing and tells what the bucket holds.
func probeOf(op hotparam.RemoteOp) hotparam.RemoteOp {
	op.Probe = true
	return op
}

// emptyAt takes the ten tokens of op's full bucket (a rule of 10 a second) at t0+at, in both
// stores.
func emptyAt(t *testing.T, booked, ref *Store, clk *fakeClock, op hotparam.RemoteOp, at time.Duration) {
	t.Helper()
	clk.set(at)
	for range 10 {
		eval(t, booked, op)
		eval(t, ref, op)
	}
}

// refuseThenTake has a call of op's empty bucket (a rule of 10 a second) refused at t0+at in
// both stores, the value hot here, and the token 50ms later taken, which books ahead.
func refuseThenTake(t *testing.T, booked, ref *Store, clk *fakeClock, op hotparam.RemoteOp, at time.Duration) {
	t.Helper()
	clk.set(at)
	if eval(t, booked, op)[0].Allowed || eval(t, ref, op)[0].Allowed {
		t.Fatalf("a call of the empty bucket at %v allowed", at)
	}
	clk.set(at + 50*ms)
	if !eval(t, booked, op)[0].Allowed || !eval(t, ref, op)[0].Allowed {
		t.Fatalf("the token at %v refused", at+50*ms)
	}
}

// A booking that ends with tokens left, without a call of its value after it, gives them back on
// its own: the bucket then holds what it would have held without the booking.
func TestBookingEndsOnItsOwn(t *testing.T) {
	booked, ref, _, clk := bookingStores(t, 200*ms)
	op := hotparam.RemoteOp{RuleID: "r", Value: "v", Count: 10, Duration: time.Second, Hits: 1}
	bookAt100ms(t, booked, ref, clk, op) // books the two of the next 200ms
	if st := booked.Stats(); st.Booked != 2 {
		t.Fatalf("booked %d tokens, want 2 (200ms at 10 a second)", st.Booked)
	}
	// no call after it: once the booking is over (300ms on the store's clock), its timer gives
	// both back
	clk.set(time.Second)
	waitFor(t, "the two tokens given back", func() bool { return booked.Stats().BookBack == 2 })
	probe := probeOf(op)
	if got, want := eval(t, booked, probe)[0], eval(t, ref, probe)[0]; got != want || got.Remaining != 9 {
		t.Errorf("a second on: booked bucket %+v, the bucket %+v: want the same, 9 tokens", got, want)
	}
}

// Many callers on one value over its limit, booking ahead 100ms: a script call books up to the
// tokens of 100ms, so that the value costs Redis far fewer script calls than the tokens it
// gives, and across two replicas sharing the bucket no span of time admits more than the
// bucket allows (its capacity plus its rate over the span).
func TestBookingUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	open := func() *Store {
		return openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 2 * time.Second, BookAhead: 100 * ms})
	}
	replicas := []*Store{open(), open()}
	op := hotparam.RemoteOp{RuleID: "load", Value: "hot", Count: 200, Duration: time.Second, Hits: 1}
	loadScript(t, replicas[0], op)
	scripts0 := srv.CommandCalls("evalsha") + srv.CommandCalls("eval")
	type span struct{ start, end time.Time } // an admission happened in between
	var mu sync.Mutex
	var admits []span
	var failed atomic.Int64
	begin := time.Now()
	stop := begin.Add(1500 * ms)
	var wg sync.WaitGroup
	for c := range 16 {
		s := replicas[c%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]hotparam.RemoteResult, 1)
			for time.Now().Before(stop) {
				start := time.Now()
				if err := s.Eval(context.Background(), []hotparam.RemoteOp{op}, res); err != nil {
					failed.Add(1)
					continue
				}
				if res[0].Allowed {
					mu.Lock()
					admits = append(admits, span{start, time.Now()})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	scripts := srv.CommandCalls("evalsha") + srv.CommandCalls("eval") - scripts0
	var booked, given uint64
	for _, s := range replicas {
		booked += s.Stats().Booked
		given += s.Stats().BookGiven
	}
	if booked == 0 || given == 0 || int64(scripts)*3 > int64(len(admits)) {
		t.Errorf("%d admitted in %d script calls (%d tokens booked, %d given out of bookings): want a third as many calls or fewer",
			len(admits), scripts, booked, given)
	}
	// admissions i..j (by start) all happened within [start of i, the latest end among them]:
	// at most the capacity (200) plus the rate over it, and one at its edge
	slices.SortFunc(admits, func(a, b span) int { return a.start.Compare(b.start) })
	for i := range admits {
		last := admits[i].end
		for j := i; j < len(admits); j++ {
			if admits[j].end.After(last) {
				last = admits[j].end
			}
			w := last.Sub(admits[i].start)
			if allowed := 201 + int(w*200/time.Second); j-i+1 > allowed {
				t.Fatalf("%d admitted within %v: the bucket allows %d", j-i+1, w, allowed)
			}
		}
	}
	// and not many fewer than it allows over the run: the callers always ask
	if min := 200 + int(elapsed*200/time.Second)*4/5; len(admits) < min {
		t.Errorf("%d admitted in %v: want %d or more", len(admits), elapsed, min)
	}
	t.Logf("%d admitted in %v, %d script calls, %d tokens booked, %d given out of bookings", len(admits), elapsed, scripts, booked, given)
	for _, s := range replicas {
		t.Logf("%+v", s.Stats())
	}
}

// A booked token that is due and not given stays the replica's after the booking ends, as it
// stays in the bucket, until the booking's length again has passed or the bucket would be full;
// then it goes back. Every answer is the bucket's, the remaining counting the tokens gained
// after the booked ones too.
func TestBookingKeepsDueTokens(t *testing.T) {
	booked, ref, _, clk := bookingStores(t, 300*ms)
	op := hotparam.RemoteOp{RuleID: "keep", Value: "v", Count: 10, Duration: time.Second, Hits: 1}
	both := func(at time.Duration, o hotparam.RemoteOp) hotparam.RemoteResult {
		t.Helper()
		clk.set(at)
		got, want := eval(t, booked, o)[0], eval(t, ref, o)[0]
		if got != want {
			t.Fatalf("t0+%v: booking ahead %+v, the bucket %+v (stats %+v)", at, got, want, booked.Stats())
		}
		return got
	}
	for range 10 { // the bucket emptied
		both(0, op)
	}
	both(50*ms, op) // refused: the value is hot here
	if !both(100*ms, op).Allowed || booked.Stats().Booked != 3 {
		t.Fatalf("the token at 100ms: stats %+v, want 3 tokens booked (due at 200, 300 and 400ms)", booked.Stats())
	}
	calls := booked.Stats().Calls
	probe := probeOf(op)
	both(450*ms, op)    // the first booked token, with two more there
	both(850*ms, op)    // after the booking's end (500ms): the second, and the bucket's own since
	both(870*ms, probe) // the third is there
	if got := booked.Stats().Calls; got != calls {
		t.Errorf("%d calls to Redis for the booked tokens, want none", got-calls)
	}
	// past its keep (900ms: the booking's length after its end) the third goes back first
	both(1500*ms, probe)
	both(1500*ms, op)
	if st := booked.Stats(); st.BookBack != 1 || st.BookGiven != 2 {
		t.Errorf("stats %+v: want 2 booked tokens given, 1 given back", st)
	}
}

// A store that closes gives back the tokens it booked and did not give: the bucket then holds
// what it would without the booking.
func TestBookingGivenBackOnClose(t *testing.T) {
	booked, ref, _, clk := bookingStores(t, 500*ms)
	op := hotparam.RemoteOp{RuleID: "close", Value: "v", Count: 10, Duration: time.Second, Hits: 1}
	bookAt100ms(t, booked, ref, clk, op)
	if st := booked.Stats(); st.Booked != 5 {
		t.Fatalf("stats %+v: want 5 tokens booked", st)
	}
	booked.Close()
	if st := booked.Stats(); st.BookBack != 5 {
		t.Fatalf("stats %+v: want the 5 tokens given back on Close", st)
	}
	// the bucket, read by a store without a cache under the booked store's prefix, holds what the
	// bucket without the booking holds
	direct := openStore(t, Config{Addrs: booked.cfg.Addrs, Timeout: time.Second, BlockedCache: -1})
	direct.clock = clk.get
	clk.set(300 * ms)
	probe := probeOf(op)
	if got, want := eval(t, direct, probe)[0], eval(t, ref, probe)[0]; got != want || got.Remaining != 2 {
		t.Errorf("after Close: the booked bucket %+v, the bucket %+v: want the same, 2 tokens", got, want)
	}
}

// No more bookings than the cache of blocked values holds entries run at once (their entries are
// never evicted): with room for 2, of three hot values the third takes its token without
// booking, and its answers are still the bucket's.
func TestBookingsBoundedByTheCache(t *testing.T) {
	booked, ref, _, clk := bookingStores(t, 300*ms)
	booked.blk = newBlocked(2)
	for _, v := range []string{"a", "b", "c"} {
		op := hotparam.RemoteOp{RuleID: "bound", Value: v, Count: 10, Duration: time.Second, Hits: 1}
		bookAt100ms(t, booked, ref, clk, op)
	}
	if st := booked.Stats(); st.Booked != 6 || booked.blk.bookings.Load() != 2 {
		t.Errorf("stats %+v, %d bookings open: want 2 bookings of 3 tokens", st, booked.blk.bookings.Load())
	}
	clk.set(250 * ms)
	for _, v := range []string{"a", "b", "c"} {
		op := hotparam.RemoteOp{RuleID: "bound", Value: v, Count: 10, Duration: time.Second, Hits: 1}
		if got, want := eval(t, booked, op)[0], eval(t, ref, op)[0]; got != want {
			t.Errorf("%s at 250ms: booking ahead %+v, the bucket %+v", v, got, want)
		}
	}
}

// A value is hot, and books, only when a call was refused since the token before: one refused
// before a quiet spell, whose calls come back in a burst that takes what its bucket gained, does
// not book with the last of those tokens (a burst shorter than a token's time would leave them
// to go back, a give-back call each). A refusal in the new burst makes it hot again.
func TestBookingOnlyWhileRefused(t *testing.T) {
	booked, ref, _, clk := bookingStores(t, 200*ms)
	op := hotparam.RemoteOp{RuleID: "burst", Value: "v", Count: 10, Duration: time.Second, Hits: 1}
	emptyAt(t, booked, ref, clk, op, 0)
	clk.set(50 * ms)
	eval(t, booked, op) // refused: the value is hot here
	eval(t, ref, op)
	// two seconds later the bucket is full again: a burst takes its ten tokens
	clk.set(2 * time.Second)
	for i := range 10 {
		got, want := eval(t, booked, op)[0], eval(t, ref, op)[0]
		if !got.Allowed || got != want {
			t.Fatalf("call %d of the burst: %+v, the bucket %+v", i, got, want)
		}
	}
	if st := booked.Stats(); st.Booked != 0 {
		t.Fatalf("stats %+v: the last token of the burst booked %d, want none (no refusal since the token before)", st, st.Booked)
	}
	// refused in this burst, the value books with the next token
	refuseThenTake(t, booked, ref, clk, op, 2050*ms)
	if st := booked.Stats(); st.Booked != 2 {
		t.Errorf("stats %+v: want 2 tokens booked after the refusal in the burst", st)
	}
}
