package redisstore

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// A batch of bucket acquisitions of one key answers each as the same calls sent one by one at
// the same instant: calls of one to four hits, shadow calls, probes, and runs of the same call.
func TestBatchMatchesCallsOneByOne(t *testing.T) {
	s, _, clk := newTestStore(t)
	c := s.client.Load().c
	rng := rand.New(rand.NewPCG(1, 9))
	at := time.Duration(0)
	for round := range 30 {
		at += time.Duration(rng.Int64N(int64(700 * ms)))
		clk.set(at)
		rule := hotparam.RemoteOp{RuleID: "bt", Count: 5, Burst: 2, Duration: time.Second}
		n := 1 + rng.IntN(8)
		ops := make([]hotparam.RemoteOp, n)
		for i := range ops {
			if i > 0 && rng.IntN(2) == 0 { // the op before again, as a hot value's calls are
				ops[i] = ops[i-1]
				continue
			}
			ops[i] = rule
			ops[i].Hits = 1 + rng.Int64N(4)
			ops[i].Shadow = rng.IntN(6) == 0
			ops[i].Probe = rng.IntN(6) == 0
		}
		// one by one on value "single"; after each, a probe of one hit at the same instant
		// tells when the next token is there (a probe takes nothing)
		want := make([]hotparam.RemoteResult, n)
		wantNext := make([]time.Duration, n)
		for i := range ops {
			o := ops[i]
			o.Value = "single"
			want[i] = eval(t, s, o)[0]
			p := rule
			p.Value, p.Hits, p.Probe = "single", 1, true
			if pr := eval(t, s, p)[0]; want[i].Allowed && !pr.Allowed {
				wantNext[i] = pr.RetryAfter
			}
		}
		// as one batch on value "batched"
		for i := range ops {
			ops[i].Value = "batched"
		}
		k := key(DefaultPrefix, &ops[0])
		args := []string{s.now(), "*"}
		for i := range ops {
			if i > 0 && ops[i] == ops[i-1] && round%2 == 0 { // the op before again, as batchGroup sends it
				args = append(args, "")
				continue
			}
			args = append(args, opArg(&ops[i], 1, 0, false, ops[i].Hits))
		}
		g := []group{{keys: []string{k}, args: args}}
		if err := s.exec(context.Background(), c, g); err != nil {
			t.Fatal(err)
		}
		if len(g[0].out) != 6*n {
			t.Fatalf("round %d: %d numbers for %d ops", round, len(g[0].out), n)
		}
		for i := range ops {
			got, next, _ := batchResult(g[0].out[6*i:])
			if got != want[i] || next != wantNext[i] {
				t.Fatalf("round %d op %d (hits %d): batched %+v next token in %v, one by one %+v next in %v",
					round, i, ops[i].Hits, got, next, want[i], wantNext[i])
			}
		}
	}
}

// hammer makes each calls of op from each of clients goroutines, all let go at once, and
// returns how many were admitted and how many failed; refused, when not nil, sees each refusal.
func hammer(s *Store, op hotparam.RemoteOp, clients, each int, refused func(hotparam.RemoteResult)) (admitted, failed int64) {
	var ad, fa atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res := make([]hotparam.RemoteResult, 1)
			for range each {
				switch err := s.Eval(context.Background(), []hotparam.RemoteOp{op}, res); {
				case err != nil:
					fa.Add(1)
				case res[0].Allowed:
					ad.Add(1)
				case refused != nil:
					refused(res[0])
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return ad.Load(), fa.Load()
}

// Many clients on one value over its limit, with the cache of blocked values: the call that
// takes the last token tells when the next one is there, so the calls queued behind it and those
// after it are refused without Redis: one script call for the one token (and the calls made while
// its sender yielded, which it answers).
func TestBatchOverLimitOneScriptCallPerToken(t *testing.T) {
	srv := redistest.Start(t)
	// the calls wait for the one in flight however long it takes (BatchWait -1), as they do for a
	// Redis answering within BatchWait
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 2 * time.Second, BatchWait: -1})
	const clients, each = 40, 25
	op := hotparam.RemoteOp{RuleID: "over", Value: "hot", Count: 1, Duration: time.Hour, Hits: 1}
	loadScript(t, s, op)
	scripts0 := srv.CommandCalls("evalsha") + srv.CommandCalls("eval")
	admitted, failed := hammer(s, op, clients, each, func(r hotparam.RemoteResult) {
		if r.RetryAfter <= 0 || r.RetryAfter > time.Hour {
			t.Errorf("refused with retry after %v, want within the hour", r.RetryAfter)
		}
	})
	if failed != 0 || admitted != 1 {
		t.Errorf("admitted %d, failed %d: want 1 admitted, none failed", admitted, failed)
	}
	if scripts := srv.CommandCalls("evalsha") + srv.CommandCalls("eval") - scripts0; scripts != 1 {
		t.Errorf("script calls: %d for one token and %d refusals: want 1", scripts, clients*each-1)
	}
	// the one script call's batch answered the calls made while it yielded, at most one a
	// client; the cache every other refusal
	if st := s.Stats(); st.CacheHits < clients*each-clients || st.CacheHits > clients*each-1 {
		t.Errorf("refusals from the cache: %d, want %d to %d", st.CacheHits, clients*each-clients, clients*each-1)
	}
}

// Many clients on one value: their calls are coalesced (fewer script calls than calls), and
// exactly the allowance is admitted.
func TestBatchUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 2 * time.Second, BlockedCache: -1})
	const clients, each, allowance = 40, 25, 300
	op := hotparam.RemoteOp{RuleID: "load", Value: "hot", Count: allowance, Duration: time.Hour, Hits: 1}
	admitted, failed := hammer(s, op, clients, each, nil)
	if failed != 0 || admitted != allowance {
		t.Errorf("admitted %d, failed %d of %d calls: want exactly %d admitted, none failed",
			admitted, failed, clients*each, allowance)
	}
	scripts := srv.CommandCalls("evalsha") + srv.CommandCalls("eval")
	if scripts >= clients*each {
		t.Errorf("script calls: %d for %d calls: want fewer (coalesced)", scripts, clients*each)
	}
	if st := s.Stats(); st.Calls != clients*each || st.Errors != 0 {
		t.Errorf("stats: %d calls, %d errors; want %d, 0", st.Calls, st.Errors, clients*each)
	}
	t.Logf("%d calls in %d script calls", clients*each, scripts)
}

// The calls of a key made while the call that found nothing in flight yields the processor go
// in its batch: one script call for them all, each answered as if sent one by one. Its caller's
// cancellation, which came meanwhile, is not theirs.
func TestBatchTakesCallsMadeWhileItYields(t *testing.T) {
	srv := redistest.Start(t)
	// the yield below lasts past the others' BatchWait: with no batch in flight, their wait's end
	// sends nothing, and they go with this sender's batch
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 2 * time.Second, BatchWait: time.Millisecond})
	const others, allowance = 7, 5
	op := hotparam.RemoteOp{RuleID: "yield", Value: "hot", Count: allowance, Duration: time.Hour, Hits: 1}
	loadScript(t, s, op)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var first atomic.Bool
	yielded := make(chan struct{})
	s.yield = func() {
		if first.Swap(true) {
			return
		}
		close(yielded)
		// the others' goroutines run meanwhile: wait until they are queued (or 10s)
		for deadline := time.Now().Add(10 * time.Second); s.queued().waiting < others && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond) // their BatchWait ends meanwhile
		cancel()
	}
	scripts0 := srv.CommandCalls("evalsha") + srv.CommandCalls("eval")
	type answer struct {
		res hotparam.RemoteResult
		err error
	}
	call := func(ctx context.Context, out chan<- answer) {
		res := make([]hotparam.RemoteResult, 1)
		err := s.Eval(ctx, []hotparam.RemoteOp{op}, res)
		out <- answer{res[0], err}
	}
	firstAnswer := make(chan answer, 1)
	go call(ctx, firstAnswer)
	<-yielded
	answers := make(chan answer, others)
	for range others {
		go call(context.Background(), answers)
	}
	<-firstAnswer // answered or failed with its cancellation: either is right for a caller gone
	admitted := 0
	for range others {
		a := <-answers
		if a.err != nil {
			t.Fatalf("a call queued behind a cancelled caller's: %v", a.err)
		}
		if a.res.Allowed {
			admitted++
		}
	}
	if admitted != allowance-1 {
		t.Errorf("admitted %d of the %d others: want %d (the first took a token)", admitted, others, allowance-1)
	}
	if scripts := srv.CommandCalls("evalsha") + srv.CommandCalls("eval") - scripts0; scripts != 1 {
		t.Errorf("script calls: %d for %d calls made while the first yielded: want 1", scripts, others+1)
	}
}

// A call queued behind one that hangs gives up at its own deadline; the key is usable after.
func TestBatchQueuedCallTimesOut(t *testing.T) {
	srv := redistest.Start(t)
	// BatchWait -1: the calls wait for the one in flight however long, here until their deadline
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 500 * time.Millisecond, BreakerFailures: 100, BatchWait: -1})
	op := hotparam.RemoteOp{RuleID: "hang", Value: "v", Count: 10, Duration: time.Second, Hits: 1}
	if err := s.Eval(context.Background(), []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1)); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	errs := make(chan error, 3)
	call := func() {
		errs <- s.Eval(context.Background(), []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1))
	}
	begin := time.Now()
	go call()
	waitFor(t, "the first call in flight", func() bool { return s.queued().inFlight == 1 })
	go call()
	go call()
	waitFor(t, "two calls queued behind it", func() bool { return s.queued().waiting == 2 })
	for range 3 {
		if err := <-errs; err == nil {
			t.Error("a call with Redis paused: got nil error")
		}
	}
	if el := time.Since(begin); el > 2*time.Second {
		t.Errorf("calls answered after %v: want about the 500ms timeout", el)
	}
	srv.Resume()
	res := make([]hotparam.RemoteResult, 1)
	for i := 0; ; i++ {
		err := s.Eval(context.Background(), []hotparam.RemoteOp{op}, res)
		if err == nil {
			break
		}
		if i == 50 {
			t.Fatalf("after Redis resumed: %v", err)
		}
		time.Sleep(20 * ms)
	}
	// the goroutine that sent the last queued batch lets go of the key once it finds none left
	waitFor(t, "no queue left with nothing in flight", func() bool { return s.queued().inFlight == 0 })
}

// A queued call's timer is reused: one given back after it fired, its value read or not,
// waits its whole time again.
func TestQueuedCallTimerReused(t *testing.T) {
	for _, read := range []bool{true, false} {
		tm := startTimer(time.Millisecond)
		if read {
			<-tm.C
		} else {
			time.Sleep(10 * ms) // fired, its value never read
		}
		stopTimer(tm)
		tm = startTimer(time.Hour)
		select {
		case <-tm.C:
			t.Errorf("value read %v: a timer of an hour fired at once", read)
		case <-time.After(20 * ms):
		}
		stopTimer(tm)
	}
}

// A batch of different calls sends each its own op, a run of equal ones one argument: the
// queued calls are answered as calls one after the other would be.
func TestBatchOfDifferentOps(t *testing.T) {
	srv := redistest.Start(t)
	// BatchWait -1: the queued calls wait for the paused call in flight
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second, BreakerFailures: 100, BlockedCache: -1, BatchWait: -1})
	op := hotparam.RemoteOp{RuleID: "mixed", Value: "v", Count: 10, Duration: time.Hour, Hits: 1}
	ctx := context.Background()
	srv.Pause()
	first := make(chan error, 1)
	go func() { first <- s.Eval(ctx, []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1)) }()
	waitFor(t, "the first call in flight", func() bool { return s.queued().inFlight == 1 })
	hits := []int64{2, 2, 3}
	res := make([][]hotparam.RemoteResult, len(hits))
	errs := make(chan error, len(hits))
	for i, h := range hits { // queued one after the other, in this order
		o := op
		o.Hits = h
		res[i] = make([]hotparam.RemoteResult, 1)
		go func() { errs <- s.Eval(ctx, []hotparam.RemoteOp{o}, res[i]) }()
		waitFor(t, "the call queued", func() bool { return s.queued().waiting == i+1 })
	}
	resumeAndWait(t, srv, first, errs, len(hits))
	left := int64(10 - 1)
	for i, h := range hits {
		left -= h
		if r := res[i][0]; !r.Allowed || r.Remaining != left {
			t.Errorf("queued call %d of %d hits: %+v, want allowed with %d left", i, h, r, left)
		}
	}
}

// queueCounts is what the batcher holds: lanes with a call in flight, their flights, and calls
// queued behind them.
type queueCounts struct{ inFlight, flights, waiting int }

func (s *Store) queued() queueCounts {
	s.bat.mu.Lock()
	defer s.bat.mu.Unlock()
	q := queueCounts{inFlight: len(s.bat.queues)}
	for _, w := range s.bat.queues {
		q.flights += w.flying
		q.waiting += len(w.waiting)
	}
	return q
}

// A call queued behind one of another key that does not return waits BatchWait, then goes as a
// batch of its own beside it (Redis paused: the lane has two calls in flight), while a call of
// the key in flight waits for it however long; each is answered as its own once Redis answers,
// in three script calls, and the lane is let go.
func TestBatchWaitEndsAtBatchWait(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second, BreakerFailures: 100,
		BatchWait: 20 * ms})
	op := hotparam.RemoteOp{RuleID: "wait", Count: 5, Duration: time.Hour, Hits: 1}
	loadScript(t, s, op)
	scripts0 := srv.CommandCalls("evalsha") + srv.CommandCalls("eval") // a paused server answers no CLI
	ctx := context.Background()
	srv.Pause()
	first := make(chan error, 1)
	a := op
	a.Value = "a"
	go func() { first <- s.Eval(ctx, []hotparam.RemoteOp{a}, make([]hotparam.RemoteResult, 1)) }()
	waitFor(t, "the first call in flight", func() bool { return s.queued().inFlight == 1 })
	b := op
	b.Value, b.Hits = "b", 2
	res := make([][]hotparam.RemoteResult, 2)
	errs := make(chan error, 2)
	for i, o := range []hotparam.RemoteOp{a, b} { // a again, then b
		res[i] = make([]hotparam.RemoteResult, 1)
		go func() { errs <- s.Eval(ctx, []hotparam.RemoteOp{o}, res[i]) }()
		waitFor(t, "the call queued", func() bool { return s.queued().waiting+s.queued().flights-1 == i+1 })
	}
	queued := time.Now()
	waitFor(t, "the call of b sent beside the first", func() bool { return s.queued().flights == 2 })
	if el := time.Since(queued); el < 10*ms {
		t.Errorf("the queued call went after %v: want after its BatchWait of 20ms", el)
	}
	if q := s.queued(); q.waiting != 1 {
		t.Errorf("queued: %+v, want the second call of a still waiting for the first", q)
	}
	resumeAndWait(t, srv, first, errs, 2)
	for i, left := range []int64{3, 3} {
		if r := res[i][0]; !r.Allowed || r.Remaining != left {
			t.Errorf("queued call %d: %+v, want allowed with %d left", i, r, left)
		}
	}
	if scripts := srv.CommandCalls("evalsha") + srv.CommandCalls("eval") - scripts0; scripts != 3 {
		t.Errorf("script calls: %d, want 3 (the call in flight, the call of b after its wait, then a's)", scripts)
	}
	waitFor(t, "nothing in flight", func() bool { return s.queued() == queueCounts{} })
}

// loadScript loads the store's script with a call of op on a value of its own, so that the
// calls after it are one EVALSHA each.
func loadScript(t *testing.T, s *Store, op hotparam.RemoteOp) {
	t.Helper()
	op.Value = "warm"
	if err := s.Eval(context.Background(), []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1)); err != nil {
		t.Fatal(err)
	}
}

// A batch of bucket acquisitions of several keys and rule numbers, ordered by run, answers each
// as the same calls sent one by one at the same instant in that order, each key once in KEYS.
func TestBatchOfManyKeysMatchesCallsOneByOne(t *testing.T) {
	s, _, clk := newTestStore(t)
	c := s.client.Load().c
	rng := rand.New(rand.NewPCG(3, 7))
	rules := []hotparam.RemoteOp{
		{RuleID: "mk-a", Count: 5, Burst: 2, Duration: time.Second},
		{RuleID: "mk-a", Count: 3, Duration: time.Second}, // the same key, its rule's count changed
		{RuleID: "mk-b", Count: 2, Duration: 300 * ms},
	}
	at := time.Duration(0)
	for round := range 30 {
		at += time.Duration(rng.Int64N(int64(700 * ms)))
		clk.set(at)
		n := 1 + rng.IntN(12)
		batch := make([]*waiter, n)
		for i := range batch {
			op := rules[rng.IntN(len(rules))]
			op.Value = "batched-v" + strconv.Itoa(rng.IntN(3))
			op.Hits = 1 + rng.Int64N(3)
			op.Shadow = rng.IntN(6) == 0
			batch[i] = &waiter{op: op, key: key(DefaultPrefix, &op)}
		}
		ordered := byRun(batch)
		if len(ordered) != n {
			t.Fatalf("round %d: byRun gave %d calls of %d", round, len(ordered), n)
		}
		// one by one in that order, on values of their own
		want := make([]hotparam.RemoteResult, n)
		wantNext := make([]time.Duration, n)
		for i, w := range ordered {
			o := w.op
			o.Value = "single-" + o.Value // the same calls on values of their own
			want[i] = eval(t, s, o)[0]
			p := o
			p.Hits, p.Probe, p.Shadow = 1, true, false
			if pr := eval(t, s, p)[0]; want[i].Allowed && !pr.Allowed {
				wantNext[i] = pr.RetryAfter
			}
		}
		for i := 1; i < n; i++ { // a run's calls are together
			for j := 0; j < i-1; j++ {
				if runOf(ordered[j]) == runOf(ordered[i]) && runOf(ordered[i-1]) != runOf(ordered[i]) {
					t.Fatalf("round %d: call %d's run is split", round, i)
				}
			}
		}
		g := []group{batchGroup(ordered, s.now())}
		seen := map[string]bool{}
		for _, k := range g[0].keys {
			if seen[k] {
				t.Fatalf("round %d: key %s twice in KEYS", round, k)
			}
			seen[k] = true
		}
		if err := s.exec(context.Background(), c, g); err != nil {
			t.Fatal(err)
		}
		if len(g[0].out) != 6*n {
			t.Fatalf("round %d: %d numbers for %d ops", round, len(g[0].out), n)
		}
		for i, w := range ordered {
			got, next, _ := batchResult(g[0].out[6*i:])
			if got != want[i] || next != wantNext[i] {
				t.Fatalf("round %d op %d (%s count %d hits %d): batched %+v next token in %v, one by one %+v next in %v",
					round, i, w.op.RuleID, w.op.Count, w.op.Hits, got, next, want[i], wantNext[i])
			}
		}
	}
}

// The calls of many values made while one is in flight go together once it returns: one
// script call for each maxBatch of them, all sent at once, each answered as its own call.
func TestBatchOfManyValues(t *testing.T) {
	srv := redistest.Start(t)
	// BatchWait -1: the queued calls wait for the paused call in flight
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second, BreakerFailures: 1000, BatchWait: -1})
	op := hotparam.RemoteOp{RuleID: "many", Count: 3, Duration: time.Hour, Hits: 1}
	loadScript(t, s, op)
	ctx := context.Background()
	scripts0 := srv.CommandCalls("evalsha") + srv.CommandCalls("eval") // a paused server answers no CLI
	srv.Pause()
	first := make(chan error, 1)
	o := op
	o.Value = "first"
	go func() { first <- s.Eval(ctx, []hotparam.RemoteOp{o}, make([]hotparam.RemoteResult, 1)) }()
	waitFor(t, "the first call in flight", func() bool { return s.queued().inFlight == 1 })
	const values = 2*maxBatch + 10
	res := make([][]hotparam.RemoteResult, values)
	errs := make(chan error, values)
	for i := range values {
		o := op
		o.Value = "value-" + strconv.Itoa(i)
		if i%5 == 4 {
			o.Hits = 2
		}
		res[i] = make([]hotparam.RemoteResult, 1)
		go func() { errs <- s.Eval(ctx, []hotparam.RemoteOp{o}, res[i]) }()
	}
	waitFor(t, "every call queued behind the first", func() bool { return s.queued().waiting == values })
	resumeAndWait(t, srv, first, errs, values)
	want := 1 + (values+maxBatch-1)/maxBatch // the first, then the queue in script calls of maxBatch
	if scripts := srv.CommandCalls("evalsha") + srv.CommandCalls("eval") - scripts0; scripts != want {
		t.Errorf("script calls: %d for %d calls of different values queued behind one: want %d", scripts, values, want)
	}
	for i := range values {
		left := int64(2)
		if i%5 == 4 {
			left = 1
		}
		if r := res[i][0]; !r.Allowed || r.Remaining != left {
			t.Errorf("value %d: %+v, want allowed with %d left", i, r, left)
		}
	}
	waitFor(t, "nothing in flight", func() bool { return s.queued().inFlight == 0 })
}

// resumeAndWait resumes srv and waits for the first call's error and n others' on errs, each nil.
func resumeAndWait(t *testing.T, srv *redistest.Server, first, errs <-chan error, n int) {
	t.Helper()
	srv.Resume()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Timeout is a check's deadline, its wait in the queue included: a call queued behind one of its
// key that does not return (Redis paused) is sent when that call gives up, and then has what is
// left of its Timeout, not a Timeout of its own. Its error says the deadline passed.
func TestQueuedCallEndsAtItsTimeout(t *testing.T) {
	const timeout = 300 * ms
	srv := redistest.Start(t)
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: timeout, BreakerFailures: 100})
	op := hotparam.RemoteOp{RuleID: "deadline", Value: "a", Count: 5, Duration: time.Hour, Hits: 1}
	loadScript(t, s, op)
	ctx := context.Background()
	srv.Pause()
	defer srv.Resume()
	first := make(chan error, 1)
	go func() { first <- s.Eval(ctx, []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1)) }()
	waitFor(t, "the first call in flight", func() bool { return s.queued().inFlight == 1 })
	// the second call comes a sixth of the timeout after the first: the first gives up well
	// before the second's own deadline, so that the second is sent, not left in the queue
	time.Sleep(timeout / 6)
	began := time.Now()
	err := s.Eval(ctx, []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1))
	took := time.Since(began)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued call: %v, want its deadline exceeded (Redis paused)", err)
	}
	if took > timeout+timeout/3 {
		t.Errorf("queued call answered after %v: want at its Timeout %v (a wait in the queue counts)", took, timeout)
	}
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("first call: %v, want its deadline exceeded", err)
	}
}

// With Redis stopped and started again at random under calls of a few values from many
// goroutines, every call ends by its Timeout (and the scheduler's slack), no lane is left held,
// and no call is allowed that did not take its token: a value's tokens taken in Redis are at
// least its calls allowed, and at most those and the calls that failed (a call that gave up
// may have been run).
func TestBatchDeadlinesUnderPauses(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and starts redis-server for seconds")
	}
	const (
		timeout = 40 * ms
		slack   = 250 * ms // scheduling on a loaded 2-core machine, the race detector included
		values  = 4
		callers = 16
	)
	srv := redistest.Start(t)
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: timeout, BreakerFailures: 1 << 30})
	op := hotparam.RemoteOp{RuleID: "pauses", Count: 100000, Duration: 10000 * time.Hour, Hits: 1}
	loadScript(t, s, op)
	var allowed, failed [values]atomic.Int64
	var slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			res := make([]hotparam.RemoteResult, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				v := rng.IntN(values)
				o := op
				o.Value = "p" + strconv.Itoa(v)
				began := time.Now()
				err := s.Eval(context.Background(), []hotparam.RemoteOp{o}, res)
				for d := int64(time.Since(began)); ; {
					if old := slowest.Load(); d <= old || slowest.CompareAndSwap(old, d) {
						break
					}
				}
				switch {
				case err != nil:
					failed[v].Add(1)
				case res[0].Allowed:
					allowed[v].Add(1)
				default:
					t.Errorf("value %d refused with %d tokens: %+v", v, op.Count, res[0])
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(11, 13))
	for range 12 {
		srv.Pause()
		time.Sleep(time.Duration(rng.Int64N(int64(3 * timeout))))
		srv.Resume()
		time.Sleep(time.Duration(rng.Int64N(int64(timeout))))
	}
	close(stop)
	wg.Wait()
	if d := time.Duration(slowest.Load()); d > timeout+slack {
		t.Errorf("slowest call took %v: want within its Timeout %v (+%v)", d, timeout, slack)
	}
	waitFor(t, "every lane let go", func() bool { return s.queued() == queueCounts{} })
	for v := range values {
		p := op
		p.Value, p.Probe = "p"+strconv.Itoa(v), true
		r := eval(t, s, p)[0]
		taken := op.Count - r.Remaining
		a, f := allowed[v].Load(), failed[v].Load()
		if taken < a || taken > a+f {
			t.Errorf("value %d: %d tokens taken in Redis, %d calls allowed and %d failed: want between %d and %d",
				v, taken, a, f, a, a+f)
		}
		if a == 0 || f == 0 {
			t.Errorf("value %d: %d allowed, %d failed: want both (Redis up and stopped in turn)", v, a, f)
		}
	}
}

// A queued batch's round trip has the Timeout of a call, whatever its calls have left of
// theirs: with Redis slow but answering (100ms of round trip, a Timeout of 150ms), a call that
// waited most of its deadline for the call in flight gives up at it, but its batch is answered
// and not counted as Redis failing (the breaker's count of consecutive failures stays 0).
func TestQueuedBatchHasTheTimeoutOfACall(t *testing.T) {
	const timeout = 150 * ms
	srv := redistest.Start(t)
	addr := redistest.DelayProxy(t, srv.Addr(), 50*ms)
	op := hotparam.RemoteOp{RuleID: "slow", Count: 5, Duration: time.Hour, Hits: 1}
	// the script loaded at once, not a round trip away
	loadScript(t, openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: time.Second}), op)
	s := openStore(t, Config{Addrs: []string{addr}, Timeout: timeout, BreakerFailures: 1000, BatchWait: -1})
	ctx := context.Background()
	// warm: the client's connections are made on first use, each of its pipelines one, taken at
	// random by a call (pings take the first), and the first call on one takes two round trips,
	// past the Timeout. Calls of two ops, which are not batched, go at once: rounds of them
	// until a round is answered in time.
	waitFor(t, "a round of calls at once answered within the Timeout", func() bool {
		var failed atomic.Bool
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x, y := op, op
				x.Value, y.Value, y.RuleID = "warm"+strconv.Itoa(i), "warm"+strconv.Itoa(i), "slow2"
				err := s.Eval(ctx, []hotparam.RemoteOp{x, y}, make([]hotparam.RemoteResult, 2))
				if i%4 == 0 {
					err = cmp.Or(err, s.Ping(ctx))
				}
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						t.Logf("warm: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		return !failed.Load()
	})
	first := make(chan error, 1)
	a := op
	a.Value = "a"
	go func() { first <- s.Eval(ctx, []hotparam.RemoteOp{a}, make([]hotparam.RemoteResult, 1)) }()
	waitFor(t, "the first call in flight", func() bool { return s.queued().inFlight == 1 })
	time.Sleep(10 * ms) // then b: sent when a returns, with about 60ms of its deadline left
	b := op
	b.Value = "b"
	err := s.Eval(ctx, []hotparam.RemoteOp{b}, make([]hotparam.RemoteResult, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued call: %v, want its deadline exceeded (its batch sent with less than a round trip of it left)", err)
	}
	if err := <-first; err != nil {
		t.Errorf("first call: %v", err)
	}
	waitFor(t, "the queued call's batch answered", func() bool { return s.queued() == queueCounts{} })
	if n := s.br.fails.Load(); n != 0 {
		t.Errorf("%d consecutive failures counted: a batch sent with what its calls had left of their deadline was counted as Redis failing", n)
	}
	if r := eval(t, s, b)[0]; !r.Allowed || r.Remaining != 3 {
		t.Errorf("b after: %+v, want allowed with 3 left (the batch given up on took a token)", r)
	}
}

// A batch sends only the calls whose callers still wait: one whose deadline has passed is
// answered with that, and takes no token; none left, nothing is sent.
func TestBatchLeavesOutCallsPastTheirDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BlockedCache: -1})
	c := s.client.Load().c
	op := hotparam.RemoteOp{RuleID: "late", Count: 5, Duration: time.Hour, Hits: 1}
	loadScript(t, s, op)
	call := func(value string, deadline time.Time) *waiter {
		o := op
		o.Value = value
		return &waiter{op: o, key: s.keys([]hotparam.RemoteOp{o})[0], done: make(chan struct{}), deadline: deadline}
	}
	scripts := func() int { return srv.CommandCalls("evalsha") + srv.CommandCalls("eval") }
	before := scripts()
	late, live := call("gone", time.Now().Add(-time.Millisecond)), call("kept", time.Now().Add(time.Minute))
	s.sendBatch(context.Background(), c, []*waiter{late, live}, s.localNow(), time.Time{})
	if !errors.Is(late.err, context.DeadlineExceeded) {
		t.Errorf("call past its deadline: %v, want its deadline exceeded", late.err)
	}
	if live.err != nil || !live.res.Allowed || live.res.Remaining != 4 {
		t.Errorf("call still waited for: %+v, %v; want allowed with 4 left", live.res, live.err)
	}
	if n := scripts() - before; n != 1 {
		t.Errorf("%d script calls, want 1 (the call waited for alone)", n)
	}
	probe := op
	probe.Value, probe.Probe = "gone", true
	if r := eval(t, s, probe)[0]; r.Remaining != 5 {
		t.Errorf("the value of the call past its deadline: %d tokens left, want 5 (none taken)", r.Remaining)
	}
	before = scripts()
	s.sendBatch(context.Background(), c, []*waiter{call("gone", time.Now().Add(-time.Millisecond))}, s.localNow(), time.Time{})
	if n := scripts() - before; n != 0 {
		t.Errorf("%d script calls for a batch of calls all past their deadlines, want none", n)
	}
}
