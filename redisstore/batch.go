package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
)

// Calls of one bucket acquisition (one value, one rule; no refund record) are coalesced while
// one is in flight to their lane: the calls that arrive meanwhile are queued and sent together,
// as one script call of up to maxBatch calls, when it returns. A lane is the whole Redis in
// standalone mode and one slot in cluster mode, where a script's keys must share a slot, so
// that the calls of many values share a script call there as the calls of one value do. The
// script answers each as if they had been sent one after the other at the same instant (Redis
// runs pipelined calls one after the other anyway), reading and writing the state of a key and rule once
// for the calls of it that come together. A call that finds nothing in flight is sent
// after its goroutine yields the processor once (runtime.Gosched), and so is each batch of the
// queue: the goroutines ready to run meanwhile bring their calls of the lane into the batch. With
// nothing else ready to run the yield returns at once, so coalescing adds no wait at low load;
// under load it adds the run of the goroutines that were ready, and the wait for the call in
// flight, which it pays back by Redis doing one script call where it would do many. That wait
// is at most Config.BatchWait (1ms): then the calls waiting go as a batch of their own, beside
// the one in flight, so that a call takes at most a round trip and BatchWait however far Redis
// is, where waiting for the call in flight would add up to a round trip (with Redis a few
// milliseconds away, most of a check's timeout; with closed-loop callers, a lone call in flight
// would hold all the others back a round trip at every turn). (grpc-go's loopy
// writer yields the same way before it writes a small batch of frames.) On one hot value with
// 50 calls in flight the yield took Redis's commands a check (each script call and the commands
// it makes) from 0.73–0.89 to 0.39–0.40 (with grpc-go's client; 0.52–0.62 to 0.32–0.33 with
// bench/rlcompare's frame-level load), and Redis's CPU a check to 0.47–0.89 of what it was in
// five of seven rounds side by side. With many values asked for at once, each a call of its
// own, a lane rather than a key takes Redis's fixed cost of a script call (the call, its
// arguments, reading the clock: about half of a call that takes a token) once for a batch.

// batcher holds the queues of calls waiting for the call in flight on their lane.
type batcher struct {
	mu     sync.Mutex
	queues map[queueKey]*queue
}

// queue is a lane's: the calls waiting, and the batches in flight. A call that finds a batch
// in flight waits for it to return, or for Config.BatchWait, whichever comes first: then the
// calls waiting go as a batch of their own, beside the one in flight (a lane has several in
// flight while its round trip is longer than BatchWait, as with a Redis across a network),
// but for the calls of a key a batch in flight has, which wait for it as before.
type queue struct {
	waiting []*waiter
	flying  int            // batches in flight, and senders about to take the queue
	c       rueidis.Client // the client of the lane's first call, which its batches go through
	sent    [][]*waiter    // the batches in flight
	timer   *time.Timer    // fires at due; made with the lane's first wait
	due     time.Time      // when the calls waiting go though a batch is in flight; zero: none waits
}

// waiter is one Eval call in a batch.
type waiter struct {
	op   hotparam.RemoteOp // a copy of the caller's: its batch may read it after the caller gave up
	key  string            // its state's key
	res  hotparam.RemoteResult
	err  error
	size int   // the size of the batch it was sent in
	book int64 // the tokens its call books ahead if it takes the last of its bucket (bookFor)
	done chan struct{}
	// deadline is when its caller stops waiting: Timeout after the call came, its wait in the
	// queue included. A batch none of whose calls is still waited for is not sent.
	deadline time.Time
}

// keyBatch is the attribute of a span of a batched call: the size of its batch.
var keyBatch = attribute.Key("extauthz.redis.batch")

// batchable reports whether a call of ops may be coalesced with others: one bucket acquisition
// (or probe) the script's fast path takes. A probe in a batch is answered on the state the calls
// before it left and leaves it as it found it.
func batchable(ops []hotparam.RemoteOp) bool {
	if len(ops) != 1 {
		return false
	}
	return fast(&ops[0])
}

// maxBatch is the most calls one script call of a batch carries: a script runs alone in Redis,
// and one of 64 takings of a token keeps it for a fraction of a millisecond. A queue longer than
// that goes as several script calls, pipelined.
const maxBatch = 64

// queueKey names a queue, a lane: the slot of its calls' keys in cluster mode, 0 otherwise.
type queueKey struct{ slot uint16 }

func (s *Store) queueOf(key string) queueKey {
	if s.cfg.Mode == ModeCluster {
		return queueKey{slot: slot(key)}
	}
	return queueKey{}
}

// run is the calls of a batch of one key with the same rule numbers: the script reads and
// writes their state once.
type run struct {
	key          string
	count, burst int64
	duration     time.Duration
}

func runOf(w *waiter) run {
	return run{key: w.key, count: w.op.Count, burst: w.op.Burst, duration: w.op.Duration}
}

// timers are the timers of queued and held calls, reused: a call queued behind another waits
// at most Timeout, and most are answered long before it, so that a timer of its own would be
// made for every queued call, only to be stopped.
var timers sync.Pool

// startTimer returns a timer that fires after d, from timers when one is there; stopTimer
// stops it and gives it back.
func startTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d) // a stopped timer's channel is empty (Go 1.23 and later)
		return t
	}
	return time.NewTimer(d)
}

func stopTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// evalBatched is Eval for a batchable call, which its caller waits for a Timeout from now.
func (s *Store) evalBatched(ctx context.Context, c rueidis.Client, op *hotparam.RemoteOp, key string, res []hotparam.RemoteResult, start time.Time) error {
	t0 := time.Now()
	deadline := t0.Add(s.cfg.Timeout)
	w := &waiter{op: *op, key: key, done: make(chan struct{}), deadline: deadline}
	qk := s.queueOf(key)
	s.bat.mu.Lock()
	q := s.bat.queues[qk]
	if q == nil {
		// nothing in flight: this call goes at once, then hands the calls queued meanwhile on;
		// unless the call that was in flight when Eval looked in the cache of blocked values
		// made an entry since, which it did before it let the queue go
		q = &queue{flying: 1, c: c}
		s.bat.queues[qk] = q
		s.bat.mu.Unlock()
		s.yield()
		batch := s.takeQueued(q, w)
		if len(batch) > 1 {
			// the calls queued while it yielded go with it: its caller's cancellation is not
			// theirs (the batch is bounded by Timeout all the same)
			if b := s.refuseQueued(batch); len(b) > 0 {
				s.sendBatch(context.WithoutCancel(ctx), c, b, start, deadline)
			}
		} else if s.blk == nil || !s.answerFromCache(w, s.localNow()) {
			s.sendBatch(ctx, c, batch, start, deadline)
		}
		s.landed(q, qk, batch)
	} else {
		q.waiting = append(q.waiting, w)
		if q.due.IsZero() && s.cfg.BatchWait > 0 {
			s.arm(q, qk)
		}
		s.bat.mu.Unlock()
		timer := startTimer(time.Until(deadline))
		var gaveUp error
		select {
		case <-w.done:
		case <-ctx.Done():
			gaveUp = ctx.Err()
		case <-timer.C:
			gaveUp = fmt.Errorf("redis store: %w while queued behind the call in flight", context.DeadlineExceeded)
		}
		stopTimer(timer)
		if gaveUp != nil && !s.leave(qk, w, gaveUp) {
			// sent already: the call ends here unless its batch answered meanwhile (the batch
			// writes into w, which this goroutine no longer reads)
			select {
			case <-w.done:
			default:
				if ctx.Err() == nil {
					gaveUp = fmt.Errorf("redis store: %w before its batch was answered", context.DeadlineExceeded)
				}
				return gaveUp
			}
		}
	}
	res[0] = w.res
	if w.size == 0 && w.err == nil { // answered from the cache of blocked values: no span
		s.tracedCached(ctx, 1, w.res.Allowed)
		return nil
	}
	if s.tracer != nil {
		// the span starts when the call did, queued or not; it is made once the call is known to
		// have gone to Redis
		span := s.startAt(ctx, "redis EVALSHA", t0, attrEvalsha, keyOps.Int(1), keyBatch.Int(w.size),
			keyAllowed.Bool(w.err == nil && w.res.Allowed))
		end(span, w.err)
	}
	return w.err
}

// takeQueued returns a batch of w, the call in flight on q that has not been sent yet, and the
// calls queued behind it that may go, which it takes out of the queue, and counts it as sent.
func (s *Store) takeQueued(q *queue, w *waiter) []*waiter {
	s.bat.mu.Lock()
	defer s.bat.mu.Unlock()
	more := q.take()
	batch := make([]*waiter, 0, 1+len(more))
	batch = append(append(batch, w), more...)
	q.sent = append(q.sent, batch)
	return batch
}

// take takes out of q and returns the calls waiting that may go (called with s.bat.mu held):
// those whose key no batch in flight has, so that the calls of a key still wait for its call in
// flight, which may tell they are refused (the cache of blocked values); all of them when none
// is in flight, the usual case. The wait for the calls left ends: the next call to wait arms it
// anew.
func (q *queue) take() []*waiter {
	q.due = time.Time{}
	if len(q.sent) == 0 || len(q.waiting) == 0 {
		b := q.waiting
		q.waiting = nil
		return b
	}
	busy := make(map[string]struct{})
	for _, b := range q.sent {
		for _, w := range b {
			busy[w.key] = struct{}{}
		}
	}
	var out []*waiter
	keep := q.waiting[:0]
	for _, w := range q.waiting {
		if _, ok := busy[w.key]; ok {
			keep = append(keep, w)
		} else {
			out = append(out, w)
		}
	}
	clear(q.waiting[len(keep):])
	q.waiting = keep
	return out
}

// landedBatch forgets batch, a batch of q that returned (called with s.bat.mu held), known by
// its first element. Its keys are those it was taken with, the calls refused from the cache of
// blocked values before it was sent among them.
func (q *queue) landedBatch(batch []*waiter) {
	for i, b := range q.sent {
		if &b[0] == &batch[0] {
			q.sent = slices.Delete(q.sent, i, i+1)
			return
		}
	}
}

// leave takes w out of its queue, failing it with err, and reports whether it did: not when w
// has been sent already.
func (s *Store) leave(qk queueKey, w *waiter, err error) bool {
	s.bat.mu.Lock()
	defer s.bat.mu.Unlock()
	q := s.bat.queues[qk]
	if q == nil {
		return false
	}
	for i, x := range q.waiting {
		if x == w {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			w.err = err
			close(w.done)
			return true
		}
	}
	return false
}

// arm starts the wait of q's calls (called with s.bat.mu held, for the first call that
// waits): at due they go, unless a batch returned and took them before.
func (s *Store) arm(q *queue, qk queueKey) {
	q.due = time.Now().Add(s.cfg.BatchWait)
	if q.timer == nil {
		q.timer = time.AfterFunc(s.cfg.BatchWait, func() { s.due(q, qk) })
	} else {
		q.timer.Reset(s.cfg.BatchWait)
	}
}

// due sends q's waiting calls when their wait is over, as a flight of the lane of its own. A
// timer that fires for a wait a flight ended (it took the calls) does nothing, and one that fires
// early for the wait that is on (it was reset by a wait that ended) waits for the rest of it.
func (s *Store) due(q *queue, qk queueKey) {
	s.bat.mu.Lock()
	if s.bat.queues[qk] != q || q.due.IsZero() {
		s.bat.mu.Unlock()
		return
	}
	if len(q.waiting) == 0 || len(q.sent) == 0 {
		// the calls that waited left, or no batch is in flight: a sender is about to take them
		// (it yields first). The next call to wait arms the timer anew.
		q.due = time.Time{}
		s.bat.mu.Unlock()
		return
	}
	if left := time.Until(q.due); left > 0 {
		q.timer.Reset(left)
		s.bat.mu.Unlock()
		return
	}
	batch := q.take()
	if len(batch) == 0 { // each waits for the call of its key in flight
		s.bat.mu.Unlock()
		return
	}
	q.sent = append(q.sent, batch)
	q.flying++
	s.bat.mu.Unlock()
	s.fly(q, qk, batch)
}

// landed is what the lane's first call does once its batch returned: it lets go of the lane
// when nothing else is in flight or waiting, or sends, from another goroutine, the calls that
// are waiting.
func (s *Store) landed(q *queue, qk queueKey, batch []*waiter) {
	s.bat.mu.Lock()
	q.landedBatch(batch)
	if len(q.waiting) == 0 {
		s.release(q, qk)
		s.bat.mu.Unlock()
		return
	}
	s.bat.mu.Unlock()
	go s.fly(q, qk, nil)
}

// release ends one flight of q (called with s.bat.mu held); the last one lets go of the lane.
func (s *Store) release(q *queue, qk queueKey) {
	if q.flying--; q.flying == 0 {
		delete(s.bat.queues, qk)
		if q.timer != nil {
			q.timer.Stop()
		}
	}
}

// fly is a flight of lane qk: it sends batch (taken and counted as sent), if any, then the calls
// waiting there that may go, batch after batch, until none is left.
func (s *Store) fly(q *queue, qk queueKey, batch []*waiter) {
	for {
		// the call before may have told when a token is back: the calls it refuses are
		// answered without Redis, as those arriving now are
		if batch != nil {
			if b := s.refuseQueued(batch); len(b) > 0 {
				s.sendBatch(context.Background(), q.c, b, s.localNow(), time.Time{})
			}
		}
		s.yield() // the calls ready to be made join the next batch
		s.bat.mu.Lock()
		if batch != nil {
			q.landedBatch(batch)
		}
		batch = q.take()
		if len(batch) == 0 {
			s.release(q, qk)
			s.bat.mu.Unlock()
			return
		}
		q.sent = append(q.sent, batch)
		s.bat.mu.Unlock()
	}
}

// sendBatch sends the calls of batch (one lane) by deadline, or within Timeout when it is zero
// (a queued batch: its round trip has the Timeout a call has, so that the breaker counts
// Redis's time alone; a call in it whose own deadline comes first gives up then), as script
// calls of up to maxBatch calls each, pipelined, and answers each. ctx is the caller's for a
// call sent at once, and no caller's for a queued batch.
func (s *Store) sendBatch(ctx context.Context, c rueidis.Client, batch []*waiter, start, deadline time.Time) {
	parent := ctx
	now := time.Now()
	// the calls whose callers have stopped waiting (or are about to) are not sent, so that none
	// takes a token its caller will not have; none left, Redis, not asked, is not counted as
	// failing
	if batch = unanswered(batch, func(w *waiter) bool {
		if now.Before(w.deadline) {
			return false
		}
		w.err = fmt.Errorf("redis store: %w before it was sent", context.DeadlineExceeded)
		close(w.done)
		return true
	}); len(batch) == 0 {
		return
	}
	if deadline.IsZero() {
		deadline = now.Add(s.cfg.Timeout)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	batch = byRun(batch)
	if s.cfg.BookAhead > 0 {
		for i, w := range batch {
			if i > 0 && runOf(w) == runOf(batch[i-1]) && w.op == batch[i-1].op {
				w.book = batch[i-1].book // a run's calls: one value, one rule
				continue
			}
			// a booking of a value the batch goes to Redis for gives what is left back first;
			// an error of the wait for one is the batch's own deadline, which its call meets too
			_ = s.settleBooking(ctx, w.key)
			w.book = s.bookFor(&w.op, w.key)
		}
	}
	g := make([]group, 0, (len(batch)+maxBatch-1)/maxBatch)
	for i := 0; i < len(batch); i += maxBatch {
		g = append(g, batchGroup(batch[i:min(i+maxBatch, len(batch))], s.now()))
	}
	t := time.Now()
	err := s.exec(ctx, c, g)
	lat := time.Since(t)
	for i := range g {
		part := batch[i*maxBatch : min((i+1)*maxBatch, len(batch))]
		if g[i].out != nil && len(g[i].out) != 6*len(part) {
			err = cmp.Or(err, fmt.Errorf("redis store: %w: %d numbers for a batch of %d", errBadReply, len(g[i].out), len(part)))
			g[i].out = nil
		}
	}
	s.settle(parent, len(batch), lat, err)
	end := s.localNow()
	for i, w := range batch {
		w.size = len(batch)
		if o := g[i/maxBatch].out; o != nil {
			var next time.Duration
			var bk bookAnswer
			w.res, next, bk = batchResult(o[6*(i%maxBatch):])
			// a refusal the same as the one before (a hot value's calls) keeps the same entry
			if s.blk != nil && !(i > 0 && !w.res.Allowed && w.key == batch[i-1].key && w.op == batch[i-1].op && w.res == batch[i-1].res) {
				s.keepRefusal(w.key, &w.op, &w.res, next, bk, start, end)
			}
		} else {
			w.err = cmp.Or(err, error(errBadReply))
		}
		close(w.done)
	}
}

// byRun orders batch by run, each run in the order of its calls, and the runs of a key next to
// each other, keys in the order of their first call: the script reads each key once a run,
// and a key comes once in KEYS.
func byRun(batch []*waiter) []*waiter {
	if len(batch) < 2 {
		return batch
	}
	first := runOf(batch[0])
	same := true
	for _, w := range batch[1:] {
		if runOf(w) != first {
			same = false
			break
		}
	}
	if same { // the commonest batch: one value's calls
		return batch
	}
	order := make(map[run]int)
	keyOrder := make(map[string]int)
	var runs [][]*waiter
	for _, w := range batch {
		r := runOf(w)
		i, ok := order[r]
		if !ok {
			i = len(runs)
			order[r] = i
			runs = append(runs, nil)
		}
		runs[i] = append(runs[i], w)
		if _, ok := keyOrder[w.key]; !ok {
			keyOrder[w.key] = len(keyOrder)
		}
	}
	slices.SortStableFunc(runs, func(a, b []*waiter) int { return keyOrder[a[0].key] - keyOrder[b[0].key] })
	out := make([]*waiter, 0, len(batch))
	for _, r := range runs {
		out = append(out, r...)
	}
	return out
}

// batchGroup is the script call of part, ordered by byRun: each key once in KEYS, each op its
// own argument but for a repeated one (one request's op, many times), sent as an empty argument:
// the op before again.
func batchGroup(part []*waiter, now string) group {
	g := group{args: make([]string, 0, 2+len(part))}
	g.args = append(g.args, now, "*")
	for i, w := range part {
		if i == 0 || w.key != part[i-1].key {
			g.keys = append(g.keys, w.key)
		} else if w.op == part[i-1].op && w.book == part[i-1].book {
			g.args = append(g.args, "") // the op before again: nothing for Redis to read
			continue
		}
		g.args = append(g.args, withBook(opArg(&w.op, len(g.keys), 0, false, hitsOf(w.op)), w.book))
	}
	return g
}

// batchResult decodes the answer to a call of a batch, o's first 6 numbers, and, for a call
// that passed and left less than a token, the time until one is there (else 0) and what it
// booked ahead (a bucket's wait number, and its remaining, which is then the units the bucket
// lacked of a token; none else).
func batchResult(o []int64) (r hotparam.RemoteResult, next time.Duration, bk bookAnswer) {
	r = hotparam.RemoteResult{Allowed: o[1] == 1, Remaining: o[2], ResetAfter: time.Duration(o[3]),
		RetryAfter: time.Duration(o[4])}
	if r.Allowed {
		next, r.RetryAfter = r.RetryAfter, 0
		if o[5] > 0 {
			bk = bookAnswer{n: o[5], gap: o[2]}
			r.Remaining = 0
		}
	}
	return r, next, bk
}

// bookAnswer is what a call of a batch booked ahead: n tokens, when its bucket lacked gap units
// of a token.
type bookAnswer struct{ n, gap int64 }

// keepRefusal keeps in the cache of blocked values what Redis's answer r to op, a call of a
// batch that started at start and was answered at end, says of the next call of one hit. The
// state a call of a batch saw is the one the calls before it left, and the calls after it only
// take more, so it holds for the state stored after the batch until its end:
//   - a refused call of one hit: no token is left until its retry after;
//   - a call that passed and left less than a token (next > 0): none is left until next. It
//     does not cover a shadow call nor a probe, which take nothing, nor a postpaid rule's.
//   - a call that booked tokens ahead: they are given out as they come due, then
//     none is left until the token after them.
func (s *Store) keepRefusal(key string, op *hotparam.RemoteOp, r *hotparam.RemoteResult, next time.Duration, bk bookAnswer, start, end time.Time) {
	switch {
	case !r.Allowed && cacheable(op):
		s.blk.add(key, op, r, start, end)
	case r.Allowed && bk.n > 0:
		s.booked.Add(uint64(bk.n))
		s.blk.book(key, op, bk.gap, bk.n, start, end, func(b *booking) { s.endBooking(key, b) })
	case r.Allowed && next > 0 && !op.Shadow && !op.Probe && !op.Postpaid:
		s.blk.add(key, op, &hotparam.RemoteResult{RetryAfter: next, ResetAfter: r.ResetAfter}, start, end)
	case r.Allowed:
		s.cool(key)
	}
}

// cool forgets the entry at key, when booking ahead is on, after Redis allowed a call of its
// value and kept no entry for it (a token or more was left): a refusal kept there is over, and
// the value is no longer hot here (bookFor) until a call of it is refused again. A value
// refused before a quiet spell then does not book when a burst of its calls takes what its
// bucket gained: a burst shorter than a token's time would leave the booked tokens to go back.
func (s *Store) cool(key string) {
	if s.cfg.BookAhead > 0 {
		s.blk.drop(key)
	}
}

// refuseQueued answers from the cache of blocked values the calls of batch it now refuses, as
// Eval would have had they come after the call in flight returned, and returns the others, to be
// sent (unanswered: batch itself stays as it is).
func (s *Store) refuseQueued(batch []*waiter) []*waiter {
	if s.blk == nil {
		return batch
	}
	now := s.localNow()
	return unanswered(batch, func(w *waiter) bool { return s.answerFromCache(w, now) })
}

// unanswered returns the calls of batch that answer does not answer (it reports whether it
// did). It leaves batch as it is (a lane's senders read the keys of a batch in flight, and a
// flight knows its batch by its first element): the calls left are a new slice when answer
// answers one, batch itself when it answers none.
func unanswered(batch []*waiter, answer func(*waiter) bool) []*waiter {
	var keep []*waiter
	for i, w := range batch {
		if !answer(w) {
			if keep != nil {
				keep = append(keep, w)
			}
		} else if keep == nil {
			keep = make([]*waiter, i, len(batch)-1)
			copy(keep, batch[:i])
		}
	}
	if keep == nil {
		return batch
	}
	return keep
}

// answerFromCache answers w at now from the cache of blocked values, when an entry refuses it,
// and reports whether it did.
func (s *Store) answerFromCache(w *waiter, now time.Time) bool {
	if !cacheable(&w.op) {
		return false
	}
	r, ok := s.blk.lookup(w.key, &w.op, now)
	if !ok {
		return false
	}
	w.res = r
	s.countCached(&w.op, &r)
	close(w.done)
	return true
}
