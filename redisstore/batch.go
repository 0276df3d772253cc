package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
)

// Calls of one bucket acquisition (one value, one rule; no refund record) of the same key are
// coalesced while one is in flight: the calls that arrive meanwhile are queued and sent together,
// as one script call, when it returns. The script answers each as if they had been sent one
// after the other at the same instant (Redis runs pipelined calls one after the other anyway),
// reading and writing the state once for them all. A call that finds nothing in flight is sent
// after its goroutine yields the processor once (runtime.Gosched), and so is each batch of the
// queue: the goroutines ready to run meanwhile bring their calls of the key into the batch. With
// nothing else ready to run the yield returns at once, so coalescing adds no wait at low load;
// under load it adds the run of the goroutines that were ready, and at most one round trip,
// which it pays back by Redis doing one script call where it would do many. (grpc-go's loopy
// writer yields the same way before it writes a small batch of frames.) On one hot value with
// 50 calls in flight the yield took Redis's commands a check (each script call and the commands
// it makes) from 0.73–0.89 to 0.39–0.40 (with grpc-go's client; 0.52–0.62 to 0.32–0.33 with
// bench/rlcompare's frame-level load), and Redis's CPU a check to 0.47–0.89 of what it was in
// five of seven rounds side by side.

// batcher holds the queues of calls waiting for the call in flight on their key.
type batcher struct {
	mu     sync.Mutex
	queues map[queueKey]*queue
}

type queue struct{ waiting []*waiter }

// waiter is one Eval call in a batch.
type waiter struct {
	op   *hotparam.RemoteOp
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

// queueKey names a queue: calls of one state key with the same rule numbers.
type queueKey struct {
	key          string
	count, burst int64
	duration     time.Duration
}

func queueOf(key string, op *hotparam.RemoteOp) queueKey {
	return queueKey{key: key, count: op.Count, burst: op.Burst, duration: op.Duration}
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
	w := &waiter{op: op, done: make(chan struct{})}
	qk := queueOf(key, op)
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
			if batch = s.refuseQueued(key, batch); len(batch) > 0 {
				s.sendBatch(context.WithoutCancel(ctx), c, key, batch, start)
			}
		} else if s.blk == nil || !s.answerFromCache(key, w, s.localNow()) {
			s.sendBatch(ctx, c, key, []*waiter{w}, start)
		}
		s.handOff(c, key, qk)
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
// after batch, until none is left; then the key has nothing in flight.
func (s *Store) handOff(c rueidis.Client, key string, qk queueKey) {
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
			if batch = s.refuseQueued(key, batch); len(batch) > 0 {
				s.sendBatch(context.Background(), c, key, batch, s.localNow())
			}
		}
	}()
}

// sendBatch sends the calls of batch (one key) as one script call within Timeout and answers
// each. ctx is the caller's for a call sent at once, and no caller's for a queued batch.
func (s *Store) sendBatch(ctx context.Context, c rueidis.Client, key string, batch []*waiter, start time.Time) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	args := make([]string, 0, 2+len(batch))
	args = append(args, s.now(), "*")
	for i, w := range batch {
		if i > 0 && *w.op == *batch[i-1].op { // the commonest batch: one request's op, many times
			args = append(args, args[len(args)-1])
			continue
		}
		args = append(args, opArg(w.op, 1, 0, false, hitsOf(*w.op)))
	}
	g := []group{{keys: []string{key}, args: args}}
	t := time.Now()
	err := s.exec(ctx, c, g)
	lat := time.Since(t)
	if err == nil && len(g[0].out) != 6*len(batch) {
		err = fmt.Errorf("redis store: %w: %d numbers for a batch of %d", errBadReply, len(g[0].out), len(batch))
	}
	s.settle(parent, len(batch), lat, err)
	end := s.localNow()
	for i, w := range batch {
		w.err, w.size = err, len(batch)
		if err == nil {
			var next time.Duration
			w.res, next = batchResult(g[0].out[6*i:])
			if s.blk != nil {
				s.keepRefusal(key, w.op, &w.res, next, start, end)
			}
		}
		close(w.done)
	}
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

// refuseQueued answers from the cache of blocked values the calls of batch (one key) it now
// refuses, as Eval would have had they come after the call in flight returned, and returns the
// others, to be sent.
func (s *Store) refuseQueued(key string, batch []*waiter) []*waiter {
	if s.blk == nil {
		return batch
	}
	now := s.localNow()
	keep := batch[:0]
	for _, w := range batch {
		if !s.answerFromCache(key, w, now) {
			keep = append(keep, w)
		}
	}
	return keep
}

// answerFromCache answers w (state at key) at now from the cache of blocked values, when an
// entry refuses it, and reports whether it did.
func (s *Store) answerFromCache(key string, w *waiter, now time.Time) bool {
	if !cacheable(w.op) {
		return false
	}
	r, ok := s.blk.lookup(key, w.op, now)
	if !ok {
		return false
	}
	w.res = r
	s.cacheHits.Add(1)
	close(w.done)
	return true
}
