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
// under load it adds the run of the goroutines that were ready, and at most one round trip,
// which it pays back by Redis doing one script call where it would do many. (grpc-go's loopy
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

type queue struct{ waiting []*waiter }

// waiter is one Eval call in a batch.
type waiter struct {
	op   *hotparam.RemoteOp
	key  string // its state's key
	res  hotparam.RemoteResult
	err  error
	size int // the size of the batch it was sent in
	done chan struct{}
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

// evalBatched is Eval for a batchable call.
func (s *Store) evalBatched(ctx context.Context, c rueidis.Client, op *hotparam.RemoteOp, key string, res []hotparam.RemoteResult, start time.Time) error {
	t0 := time.Now()
	w := &waiter{op: op, key: key, done: make(chan struct{})}
	qk := s.queueOf(key)
	s.bat.mu.Lock()
	q := s.bat.queues[qk]
	if q == nil {
		// nothing in flight: this call goes at once, then hands the calls queued meanwhile on;
		// unless the call that was in flight when Eval looked in the cache of blocked values
		// made an entry since, which it did before it let the queue go
		s.bat.queues[qk] = &queue{}
		s.bat.mu.Unlock()
		s.yield()
		if batch := s.takeQueued(qk, w); batch != nil {
			// the calls queued while it yielded go with it: its caller's cancellation is not
			// theirs (the batch is bounded by Timeout all the same)
			if batch = s.refuseQueued(batch); len(batch) > 0 {
				s.sendBatch(context.WithoutCancel(ctx), c, batch, start)
			}
		} else if s.blk == nil || !s.answerFromCache(w, s.localNow()) {
			s.sendBatch(ctx, c, []*waiter{w}, start)
		}
		s.handOff(c, qk)
	} else {
		q.waiting = append(q.waiting, w)
		s.bat.mu.Unlock()
		timer := startTimer(s.cfg.Timeout)
		select {
		case <-w.done:
		case <-ctx.Done():
			s.leave(qk, w, ctx.Err())
		case <-timer.C:
			s.leave(qk, w, fmt.Errorf("redis store: %w while queued behind the call in flight", context.DeadlineExceeded))
		}
		stopTimer(timer)
		<-w.done
	}
	res[0] = w.res
	if w.size == 0 && w.err == nil { // refused from the cache of blocked values: no span
		s.tracedCacheRefusal(ctx, 1)
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

// takeQueued returns a batch of w, the call in flight on qk that has not been sent yet, and the
// calls queued behind it, which it takes out of the queue; nil when none is queued.
func (s *Store) takeQueued(qk queueKey, w *waiter) []*waiter {
	s.bat.mu.Lock()
	defer s.bat.mu.Unlock()
	q := s.bat.queues[qk]
	if len(q.waiting) == 0 {
		return nil
	}
	batch := make([]*waiter, 0, 1+len(q.waiting))
	batch = append(append(batch, w), q.waiting...)
	q.waiting = nil
	return batch
}

// leave takes w out of its queue, failing it with err, unless it has been sent already.
func (s *Store) leave(qk queueKey, w *waiter, err error) {
	s.bat.mu.Lock()
	defer s.bat.mu.Unlock()
	q := s.bat.queues[qk]
	if q == nil {
		return
	}
	for i, x := range q.waiting {
		if x == w {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			w.err = err
			close(w.done)
			return
		}
	}
}

// handOff sends, from another goroutine, the calls queued on qk while a call was in flight, batch
// after batch, until none is left; then the lane has nothing in flight.
func (s *Store) handOff(c rueidis.Client, qk queueKey) {
	s.bat.mu.Lock()
	if len(s.bat.queues[qk].waiting) == 0 {
		delete(s.bat.queues, qk)
		s.bat.mu.Unlock()
		return
	}
	s.bat.mu.Unlock()
	go func() {
		for {
			s.yield() // the calls ready to be made join this batch
			s.bat.mu.Lock()
			q := s.bat.queues[qk]
			batch := q.waiting
			q.waiting = nil
			if len(batch) == 0 {
				delete(s.bat.queues, qk)
				s.bat.mu.Unlock()
				return
			}
			s.bat.mu.Unlock()
			// the call before may have told when a token is back: the calls it refuses are
			// answered without Redis, as those arriving now are
			if batch = s.refuseQueued(batch); len(batch) > 0 {
				s.sendBatch(context.Background(), c, batch, s.localNow())
			}
		}
	}()
}

// sendBatch sends the calls of batch (one lane) within Timeout, as script calls of up to
// maxBatch calls each, pipelined, and answers each. ctx is the caller's for a call sent at once,
// and no caller's for a queued batch.
func (s *Store) sendBatch(ctx context.Context, c rueidis.Client, batch []*waiter, start time.Time) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	batch = byRun(batch)
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
			w.res, next = batchResult(o[6*(i%maxBatch):])
			if s.blk != nil {
				s.keepRefusal(w.key, w.op, &w.res, next, start, end)
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
// own argument but for a repeated one (one request's op, many times), which repeats the one
// before.
func batchGroup(part []*waiter, now string) group {
	g := group{args: make([]string, 0, 2+len(part))}
	g.args = append(g.args, now, "*")
	for i, w := range part {
		if i == 0 || w.key != part[i-1].key {
			g.keys = append(g.keys, w.key)
		} else if *w.op == *part[i-1].op {
			g.args = append(g.args, g.args[len(g.args)-1])
			continue
		}
		g.args = append(g.args, opArg(w.op, len(g.keys), 0, false, hitsOf(*w.op)))
	}
	return g
}

// batchResult decodes the answer to a call of a batch, o's first 6 numbers, and, for a call
// that passed and left less than a token, the time until one is there (else 0).
func batchResult(o []int64) (r hotparam.RemoteResult, next time.Duration) {
	r = hotparam.RemoteResult{Allowed: o[1] == 1, Remaining: o[2], ResetAfter: time.Duration(o[3]),
		RetryAfter: time.Duration(o[4]), Wait: time.Duration(o[5])}
	if r.Allowed {
		next, r.RetryAfter = r.RetryAfter, 0
	}
	return r, next
}

// keepRefusal keeps in the cache of blocked values what Redis's answer r to op, a call of a
// batch that started at start and was answered at end, says of the next call of one hit. The
// state a call of a batch saw is the one the calls before it left, and the calls after it only
// take more, so it holds for the state stored after the batch until its end:
//   - a refused call of one hit: no token is left until its retry after;
//   - a call that passed and left less than a token (next > 0): none is left until next. It
//     does not cover a shadow call nor a probe, which take nothing, nor a postpaid rule's.
func (s *Store) keepRefusal(key string, op *hotparam.RemoteOp, r *hotparam.RemoteResult, next time.Duration, start, end time.Time) {
	switch {
	case !r.Allowed && cacheable(op):
		s.blk.add(key, op, r, start, end)
	case r.Allowed && next > 0 && !op.Shadow && !op.Probe && !op.Postpaid:
		s.blk.add(key, op, &hotparam.RemoteResult{RetryAfter: next, ResetAfter: r.ResetAfter}, start, end)
	}
}

// refuseQueued answers from the cache of blocked values the calls of batch it now refuses, as
// Eval would have had they come after the call in flight returned, and returns the others, to be
// sent.
func (s *Store) refuseQueued(batch []*waiter) []*waiter {
	if s.blk == nil {
		return batch
	}
	now := s.localNow()
	keep := batch[:0]
	for _, w := range batch {
		if !s.answerFromCache(w, now) {
			keep = append(keep, w)
		}
	}
	return keep
}

// answerFromCache answers w at now from the cache of blocked values, when an entry refuses it,
// and reports whether it did.
func (s *Store) answerFromCache(w *waiter, now time.Time) bool {
	if !cacheable(w.op) {
		return false
	}
	r, ok := s.blk.lookup(w.key, w.op, now)
	if !ok {
		return false
	}
	w.res = r
	s.cacheHits.Add(1)
	close(w.done)
	return true
}
