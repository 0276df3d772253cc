package redisstore

import (
	"cmp"
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/trace"
)

// The script Eval sends: its head (arguments, the fast path, the ops, loading, refund records),
// one section per kind of state (embedded in the kind's file) and its end (the run, storing,
// the answers).
var (
	//go:embed script.lua
	scriptHead string
	//go:embed script_end.lua
	scriptEnd    string
	scriptSource = scriptHead + bucketScript + throttleScript + concurrencyScript + scriptEnd
)

// ErrUnavailable is returned at once by Eval while the breaker is open (Redis failed the last
// calls) or before the first connection succeeded.
var ErrUnavailable = errors.New("redis store unavailable")

// errBadReply is wrapped by the errors of a script reply of the wrong shape.
var errBadReply = errors.New("unexpected script reply")

// Options are the hooks of a Store that a config file cannot hold.
type Options struct {
	// Observe, when not nil, is called after every Eval that went to Redis, with its latency
	// and error (nil on success). It must be fast and safe for concurrent use.
	Observe func(latency time.Duration, err error)
	// TracerProvider, when not nil, traces every call to Redis: a client span per Eval that goes
	// to Redis ("redis EVALSHA", with its ops, slot groups and outcome), per compensation of a
	// cross-slot call ("redis EVALSHA undo") and per Ping, each a child of the span in the
	// caller's context. A call refused from the cache of blocked values makes no span; it adds
	// the event "redis refusal from cache" to the caller's span.
	TracerProvider trace.TracerProvider
	// OnTransition, when not nil, is told each change of the store's availability once (the
	// breaker opening, the first decision left to the fallback, the breaker closing, with the
	// outage's counts), never once per call, in order. It is called on the goroutine that made
	// the change, with a lock held: it must be fast and must not call the Store.
	OnTransition func(Transition)
	// OnServer, when not nil, is told what Run's samples of INFO find (evictions starting and
	// stopping, a restart, an evicting policy), once per change. It is called from Run with a
	// lock held: it must be fast and must not call the Store.
	OnServer func(ServerEvent)
}

// Stats are the counters of a Store since New.
type Stats struct {
	Calls         uint64        // Eval calls that went to Redis
	Errors        uint64        // of those, the ones that failed
	ShortCircuits uint64        // Eval calls answered ErrUnavailable without a call
	RoundTrips    uint64        // script calls sent (one per slot group, retries included)
	Undos         uint64        // cross-slot compensations sent
	Latency       time.Duration // sum of the latencies of Calls
	BreakerOpen   bool
	BreakerOpens  uint64 // times the breaker opened
	Probes        uint64 // background probes sent
	// CacheHits counts the Eval calls refused from the cache of blocked values, without Redis;
	// Cached is the number of values that cache holds now.
	CacheHits uint64
	Cached    int
	// Held counts the Eval calls that waited, at most 2ms, for the instant their value's next
	// token was sure to be back in Redis before they went (see the package's "Refusals without
	// Redis").
	Held uint64
	// Booked counts the tokens booked ahead (Config.BookAhead); BookGiven the Eval calls given
	// one of them without Redis; BookBack the tokens given back to their buckets, unused;
	// BookLost those that could not be (Redis unreachable or failing).
	Booked, BookGiven, BookBack, BookLost uint64
	// Fallbacks counts the decisions callers left to their fallback (NoteFallback).
	Fallbacks uint64
	// EvictedKeys counts the keys the Redis masters evicted (maxmemory) since the first sample
	// (Check, or Run's first): the growth of INFO's evicted_keys between samples, every key of
	// the server, not only the store's. Restarts counts the samples that found a master's
	// run_id changed: a restart, its keys lost unless persisted.
	EvictedKeys, Restarts uint64
	// LastError is the error of the last call, probe or connection attempt; nil if it succeeded.
	LastError error
}

// Store is a hotparam.Remote backed by Redis. It is safe for concurrent use. Run must be running
// for the breaker to close again after Redis failed. Make one with New: the zero Store answers
// every Eval with ErrUnavailable.
type Store struct {
	cfg  Config
	opts Options
	copt rueidis.ClientOption // TLS settings (CA pool) read once, in New
	sha  string

	// clock, when not nil, replaces the Redis clock: tests pass exact instants through it.
	clock func() time.Time
	// yield is what a batch's sender does before it takes the queue (runtime.Gosched; see
	// batch.go); tests make it wait for the calls they queue.
	yield func()

	mu     sync.Mutex // serialises connecting
	client atomic.Pointer[clientBox]
	closed atomic.Bool

	tracer    trace.Tracer // nil when Options.TracerProvider is
	blk       *blocked     // nil when Config.BlockedCache is negative
	bat       batcher
	cacheHits atomic.Uint64
	held      atomic.Uint64
	// tokens booked ahead (Config.BookAhead), given out of bookings, given back, lost
	booked, bookGiven, bookBack, bookLost atomic.Uint64

	out                                   outage
	smu                                   sync.Mutex // guards samples
	samples                               map[string]*nodeSample
	evicted, restarts                     atomic.Uint64
	br                                    breaker
	calls, errs, shorts, trips, undos, pr atomic.Uint64
	latency                               atomic.Int64
	lastErr                               atomic.Pointer[error] // nil after a success
}

type clientBox struct{ c rueidis.Client }

var _ hotparam.Remote = (*Store)(nil)

// New returns a Store for cfg. It connects at once; when Redis cannot be reached, New still
// returns the Store, with its breaker open, and Run connects later. Only an invalid cfg (or an
// unreadable CAFile) is an error.
func New(cfg Config) (*Store, error) { return NewWithOptions(cfg, Options{}) }

// NewWithOptions is New with hooks.
func NewWithOptions(cfg Config, opts Options) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	copt, err := clientOption(cfg)
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum([]byte(scriptSource))
	s := &Store{cfg: cfg, opts: opts, sha: hex.EncodeToString(sum[:]), copt: copt, blk: newBlocked(cfg.BlockedCache),
		bat: batcher{queues: map[queueKey]*queue{}}, yield: runtime.Gosched}
	s.br.threshold = int64(cfg.BreakerFailures)
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(tracerName)
	}
	if err := s.connect(); err != nil {
		s.setErr(err)
		if s.br.trip() {
			s.opened(0, err)
		}
	}
	return s, nil
}

// Close gives back to their buckets the tokens booked ahead and not given (within Timeout),
// and closes the connections. Eval returns ErrUnavailable afterwards.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed.Store(true)
	s.blk.stop()
	if s.blk != nil && s.blk.bookings.Load() > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		for key, bk := range s.blk.claimAll() {
			s.giveBack(ctx, key, bk)
		}
		cancel()
	}
	if b := s.client.Swap(nil); b != nil {
		b.c.Close()
	}
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	var lastErr error
	if p := s.lastErr.Load(); p != nil {
		lastErr = *p
	}
	return Stats{
		Calls:         s.calls.Load(),
		Errors:        s.errs.Load(),
		ShortCircuits: s.shorts.Load(),
		RoundTrips:    s.trips.Load(),
		Undos:         s.undos.Load(),
		Latency:       time.Duration(s.latency.Load()),
		BreakerOpen:   s.br.open.Load(),
		BreakerOpens:  s.br.opens.Load(),
		Probes:        s.pr.Load(),
		LastError:     lastErr,
		CacheHits:     s.cacheHits.Load(),
		Held:          s.held.Load(),
		Booked:        s.booked.Load(),
		BookGiven:     s.bookGiven.Load(),
		BookBack:      s.bookBack.Load(),
		BookLost:      s.bookLost.Load(),
		Fallbacks:     s.out.fallbacks.Load(),
		EvictedKeys:   s.evicted.Load(),
		Restarts:      s.restarts.Load(),
		Cached:        s.blk.len(),
	}
}

func (s *Store) connect() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return ErrUnavailable
	}
	if s.client.Load() != nil {
		return nil
	}
	c, err := rueidis.NewClient(s.copt)
	if err != nil {
		return fmt.Errorf("cannot connect to redis: %w", err)
	}
	s.client.Store(&clientBox{c})
	return nil
}

// Run probes Redis every BreakerCooldown while the breaker is open (connecting first if New
// could not), and closes the breaker when a PING succeeds. While the breaker is closed it reads
// INFO from every node every SampleInterval, counting evictions and restarts (Stats) and
// reporting them (Options.OnServer). It returns nil when ctx is done.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(cmp.Or(s.cfg.BreakerCooldown, DefaultBreakerCooldown))
	defer t.Stop()
	info := time.NewTicker(cmp.Or(s.cfg.SampleInterval, DefaultSampleInterval))
	defer info.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-info.C:
			if !s.br.open.Load() {
				s.sample(ctx, now)
			}
		case <-t.C:
			if s.br.open.Load() {
				s.pr.Add(1)
				if s.Ping(ctx) == nil && s.br.reset() {
					s.recovered()
				}
			}
		}
	}
}

// Ping checks that Redis answers, connecting first if needed, within Timeout or half the
// BreakerCooldown, whichever is longer. It ignores the breaker: readiness checks may call it.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.connect(); err != nil {
		s.setErr(err)
		return err
	}
	b := s.client.Load()
	if b == nil {
		return ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.Timeout, s.cfg.BreakerCooldown/2))
	defer cancel()
	ctx, span := s.start(ctx, "redis PING", attrPing)
	err := b.c.Do(ctx, b.c.B().Ping().Build()).Error()
	if err != nil {
		err = fmt.Errorf("redis store: ping: %w", err)
	}
	end(span, err)
	s.setErr(err)
	return err
}

// setErr records the outcome of the last call, for Stats.
func (s *Store) setErr(err error) {
	if err == nil {
		if s.lastErr.Load() != nil {
			s.lastErr.Store(nil)
		}
		return
	}
	s.lastErr.Store(&err)
}

// Eval checks ops in Redis; see hotparam.Remote. In standalone mode all ops go in one script
// call. In cluster mode the ops are grouped by slot (one group per value) and the groups are
// sent at once, one script call each: each group is atomic, and when one group blocks while
// another consumed, Eval gives back what the others consumed (best effort: a concurrent request
// may have seen it in between, and the give-back may itself fail).
func (s *Store) Eval(ctx context.Context, ops []hotparam.RemoteOp, res []hotparam.RemoteResult) error {
	if len(res) != len(ops) {
		return fmt.Errorf("redis store: %d results for %d ops", len(res), len(ops))
	}
	if len(ops) == 0 {
		return nil
	}
	for i := range ops {
		if err := CheckOp(ops[i]); err != nil {
			return err
		}
	}
	keys := s.keys(ops)
	start := s.localNow()
	if s.blk != nil && s.refuseCached(ops, keys, res, start) {
		s.tracedCached(ctx, len(ops), res[0].Allowed)
		return nil
	}
	b := s.client.Load()
	if b == nil || !s.br.allow() {
		s.shorts.Add(1)
		return ErrUnavailable
	}
	if batchable(ops) {
		if s.blk != nil {
			if d := s.blk.hold(keys[0], &ops[0], start); d > 0 {
				s.held.Add(1)
				if err := sleep(ctx, d); err != nil {
					return err
				}
				if start = s.localNow(); s.refuseCached(ops, keys, res, start) {
					s.tracedCached(ctx, len(ops), res[0].Allowed)
					return nil
				}
			}
		}
		// its deadline counts from here, a hold for a token's return (at most maxHold) before it
		return s.evalBatched(ctx, b.c, &ops[0], keys[0], res, start)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	for _, key := range keys {
		if err := s.settleBooking(ctx, key); err != nil {
			return err
		}
	}

	ctx, span := s.start(ctx, "redis EVALSHA", attrEvalsha, keyOps.Int(len(ops)))
	t := time.Now()
	ok, groups, err := s.eval(ctx, b.c, ops, keys, res)
	lat := time.Since(t)
	if s.tracer != nil {
		span.SetAttributes(keyGroups.Int(groups), keyAllowed.Bool(ok && err == nil))
	}
	end(span, err)
	if err == nil && s.blk != nil {
		s.remember(ops, keys, res, start)
	}
	s.settle(parent, 1, lat, err)
	return err
}

// refuseCached answers a call from the cache of blocked values, and reports whether it did. It
// does for a call of one op that is in the cache and is no release (which must apply: a refund
// drops its value from the cache, since it may give tokens back) nor a shadow op (whose
// outcome is reported). A call of several ops goes to Redis: which op blocks it, and the state
// of the others, are not in the cache.
func (s *Store) refuseCached(ops []hotparam.RemoteOp, keys []string, res []hotparam.RemoteResult, now time.Time) bool {
	skip := false
	for i := range ops {
		if ops[i].Release && (ops[i].Refund || ops[i].Unhold) {
			s.blk.drop(keys[i]) // it may give back what a refusal there counted on
		}
		skip = skip || ops[i].Release || ops[i].Shadow
	}
	// Only a call of one op: a call of several is decided by which op blocks first in the
	// caller's order and reports every op's state, which the cache of one value cannot give.
	if skip || len(ops) != 1 || !cacheable(&ops[0]) {
		return false
	}
	r, ok := s.blk.lookup(keys[0], &ops[0], now)
	if !ok {
		return false
	}
	answer(ops, res, r)
	s.countCached(&ops[0], &r)
	return true
}

// countCached counts r, an answer of the cache of blocked values to op: a token of a booking
// given (a probe told one is there takes none), or a refusal.
func (s *Store) countCached(op *hotparam.RemoteOp, r *hotparam.RemoteResult) {
	switch {
	case !r.Allowed:
		s.cacheHits.Add(1)
	case !op.Probe:
		s.bookGiven.Add(1)
	}
}

// remember keeps the refusals of a call that Redis answered, those that are about the stored
// state alone: not an op after another of the same key in the call; a value it allowed cools.
func (s *Store) remember(ops []hotparam.RemoteOp, keys []string, res []hotparam.RemoteResult, start time.Time) {
	for i := range ops {
		if res[i].Allowed {
			if !slices.Contains(keys[:i], keys[i]) {
				s.cool(keys[i])
			}
			continue
		}
		if !cacheable(&ops[i]) {
			continue
		}
		if slices.Contains(keys[:i], keys[i]) {
			continue
		}
		s.blk.add(keys[i], &ops[i], &res[i], start, start)
	}
}

// tracedCached marks a call of n ops answered from the cache in the caller's span: refused, or
// given a token of a booking (allowed).
func (s *Store) tracedCached(ctx context.Context, n int, allowed bool) {
	if s.tracer != nil {
		name := "redis refusal from cache"
		if allowed {
			name = "redis token from booking"
		}
		trace.SpanFromContext(ctx).AddEvent(name, trace.WithAttributes(keyOps.Int(n)))
	}
}

// sleep waits d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := startTimer(d)
	defer stopTimer(t)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// localNow is this replica's clock, for the cache of blocked values: the test clock when set,
// cut to the microsecond as the script reads it.
func (s *Store) localNow() time.Time {
	if s.clock != nil {
		return s.clock().Truncate(time.Microsecond)
	}
	return time.Now()
}

func (s *Store) now() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock().UnixMicro(), 10)
}

// eval runs the call and reports whether every group passed, and the number of groups (script
// calls, one per slot).
func (s *Store) eval(ctx context.Context, c rueidis.Client, ops []hotparam.RemoteOp, keys []string, res []hotparam.RemoteResult) (bool, int, error) {
	groups := s.group(ops, keys)
	now := s.now()
	nonce := strconv.FormatUint(rand.Uint64(), 36)
	for i := range groups {
		groups[i].args = groups[i].encode(ops, now, nonce)
	}
	err := s.exec(ctx, c, groups)
	blocked := false
	for i := range groups {
		if groups[i].out == nil {
			continue
		}
		if derr := groups[i].decode(res); derr != nil {
			err = cmp.Or(err, derr)
			groups[i].out = nil
			continue
		}
		blocked = blocked || !groups[i].ok
	}
	if (blocked || err != nil) && len(groups) > 1 {
		// the undo has its own deadline: the call's may be spent
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		s.undo(uctx, c, ops, res, groups, now, nonce)
		cancel()
	}
	return !blocked, len(groups), err
}

// unavailable reports whether err means Redis could not serve (no answer, or an answer saying it
// cannot serve now) rather than an error in the call.
func unavailable(err error) bool {
	if errors.Is(err, errBadReply) {
		return false
	}
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return true
	}
	msg := re.Error()
	for _, p := range []string{"LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "READONLY", "OOM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
