// Package policy decides one call, whatever API it came through: the mapped entries go through
// the authority rules and then the hot-parameter rules, a throttled call is held, and the
// outcome is recorded in metrics, all in one place. The Verdict says all there is to say of
// the call: its Outcome, what an answer shows, and its audit record (Verdict.Audit). The Envoy
// handlers (package envoyapi) only translate Envoy's request into a Request and render the
// Verdict in Envoy's terms.
package policy

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// DeadlineMargin is taken off a call's deadline before it is handed to the limiter, to leave
// time for the answer to travel back.
const DeadlineMargin = time.Millisecond

// API names passed to Recorder.Decision.
const (
	APICheck     = "ext_authz"
	APIRateLimit = "ratelimit"
)

// DefaultMaxWaiting is Config.MaxWaiting when it is 0.
const DefaultMaxWaiting = 4096

// Config is the decision section of the service config.
type Config struct {
	// MaxWaiting is the most requests held in throttle queues at once (all rules, both APIs); while
	// that many wait, a request to a resource with a throttle rule is refused at once (429 /
	// OVER_LIMIT, reason `queue_full`, `extauthz_decisions_total{result="queue_full"}`).
	MaxWaiting int `json:"max_waiting"`
	// DryRun evaluates and reports every rule and refuses and delays nothing (see [Dry run and shadow
	// rules](rules.md#dry-run-and-shadow-rules)).
	DryRun bool `json:"dry_run"`
}

// ConfigError is one bad setting of the decision section, by key (e.g. "max_waiting").
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "decision config: " + e.Field + ": " + e.Reason }

// Validate returns a *ConfigError for each bad setting, joined, or nil.
func (c Config) Validate() error {
	var errs []error
	if c.MaxWaiting < 0 {
		errs = append(errs, &ConfigError{Field: "max_waiting", Reason: "must not be negative, not " + strconv.Itoa(c.MaxWaiting)})
	}
	return errors.Join(errs...)
}

// Recorder receives the metrics of every call. Implementations must be safe for concurrent use.
type Recorder interface {
	// Decision records one call and its outcome. domain is the rate-limit domain ("" for
	// ext_authz). resource is the resource a rule applied to or blocked, and "" when no rule
	// applied, so that its values stay bounded by the rules rather than by what clients send.
	Decision(api, domain, resource string, outcome Outcome, latency time.Duration)
	// QueueWait records how long a throttled call was held.
	QueueWait(d time.Duration)
}

// Options configure a Decider.
type Options struct {
	// Rules returns the rules in force (rulestore.Store.Current); required. A nil *Set means
	// no rules.
	Rules func() *rulestore.Set
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Recorder receives metrics; nil means none.
	Recorder Recorder
	Config
}

// Decider decides calls. It is safe for concurrent use.
type Decider struct {
	rules      func() *rulestore.Set
	now        func() time.Time
	rec        Recorder
	maxWaiting int64
	dryRun     bool
	waiting    atomic.Int64              // requests held in throttle queues now
	rulesCache atomic.Pointer[ruleCache] // lookups in the last rule set seen
	unenforced UnenforcedRecorder        // the Recorder, when it is one; nil otherwise

	wake    wakeups                    // when held calls are answered
	drainMu sync.Mutex                 // serialises Drain
	drain   atomic.Pointer[drainState] // never nil after New
}

// New builds a Decider. It panics if opts.Rules is nil.
func New(opts Options) *Decider {
	if opts.Rules == nil {
		panic("policy: Options.Rules is nil")
	}
	d := &Decider{rules: opts.Rules, now: opts.Now, rec: opts.Recorder,
		maxWaiting: int64(opts.MaxWaiting), dryRun: opts.DryRun}
	if d.maxWaiting <= 0 {
		d.maxWaiting = DefaultMaxWaiting
	}
	if d.now == nil {
		d.now = time.Now
	}
	d.unenforced, _ = opts.Recorder.(UnenforcedRecorder)
	d.drain.Store(&drainState{})
	return d
}

// Now reads the Decider's clock.
func (d *Decider) Now() time.Time { return d.now() }

// Waiting is how many requests are held in throttle queues now.
func (d *Decider) Waiting() int { return int(d.waiting.Load()) }

// Request is one call to decide.
type Request struct {
	API    string // APICheck or APIRateLimit
	Domain string // the rate-limit domain; "" for ext_authz
	// RequestID is Envoy's x-request-id when the call carries it; it goes to the audit record.
	RequestID string
	// Entries are the mapped request: one for ext_authz, one per descriptor for rate limits.
	// A release entry passes the authority rules unchecked.
	Entries []descriptors.Entry
	// Err, when not nil, is why the request could not be mapped (a *descriptors.RequestError
	// for what the request carries): the request is refused as invalid.
	Err error
	// SkipConcurrency leaves concurrency rules out (an API with no completion signal).
	SkipConcurrency bool
}

// Block describes what blocked a request, or would have for a shadow rule.
type Block struct {
	// Kind is Authority or ParamFlow (whatever the reason of a hot-parameter block), or, for
	// a dry run's malformed request, Invalid.
	Kind     Outcome
	Rule     int // index in its section of the rules
	Resource string
	Origin   string
	Param    string // hot-parameter blocks only
	Value    string
	// Reason is, for authority blocks, missing_origin, in_black_list or not_in_white_list; for
	// hot-parameter blocks qps, throttle, concurrency or queue_full.
	Reason string
}

// RuleName names the rule as /rules does: authority[i] or param_flow[i].
func (b *Block) RuleName() string {
	if b.Kind != Authority && b.Kind != ParamFlow {
		return ""
	}
	return b.Kind.Label() + "[" + strconv.Itoa(b.Rule) + "]"
}

// Verdict is what Decide decided. A Verdict is reused from call to call by its owner, which
// keeps its memory: Decide resets everything else.
type Verdict struct {
	Outcome Outcome
	// Rules is what the answer shows of the rules the call was decided by (nil when none
	// were in force).
	Rules *Rules
	// Err: for Invalid the mapping's error, for Cancelled the context's.
	Err error
	// At is the index of the entry (descriptor) at fault (Invalid, Authority, ParamFlow), or -1
	// (an Invalid request as a whole).
	At int
	// Block describes the block (Authority, ParamFlow).
	Block Block
	// DryRun reports that the request was allowed by the dry run (Outcome DryRun): Block (and
	// At) say what would have refused it (Block.Kind Invalid for a malformed request).
	DryRun bool
	// Shadow reports that a shadow rule would have blocked; ShadowBlock says which.
	Shadow      bool
	ShadowBlock Block
	// Limits has one Limit per entry once the hot-parameter rules ran (nil otherwise): the
	// rule that applied to it (-1 when none), its limit and what remains.
	Limits []Limit
	// RetryAfter is, for ParamFlow, how long until the request's tokens would be available.
	RetryAfter time.Duration
	// Wait is how long an allowed request was held (throttle).
	Wait time.Duration

	req    *Request         // the request decided, for Audit
	hot    []hotparam.Entry // scratch handed to the limiter
	st     []hotparam.Status
	limits []Limit
}

func (v *Verdict) reset() {
	*v = Verdict{At: -1, hot: v.hot[:0], st: v.st[:0], limits: v.limits[:0]}
}

// Decide decides req into v, holds a throttled call for its wait, and records the outcome in
// the metrics once, whatever it is; v refers to req until the next Decide (see Audit). In a
// dry run a request that would have been refused (Invalid, or blocked) is allowed instead,
// with Outcome DryRun, DryRun set and Block saying what would have refused it, and a
// throttled one is not held.
func (d *Decider) Decide(ctx context.Context, req *Request, v *Verdict) {
	start := d.now()
	v.reset()
	v.req = req
	defer d.record(req, v, start)
	d.decide(ctx, req, v, start)
	switch {
	case d.dryRun && v.Outcome != Allowed && v.Outcome != Cancelled:
		v.Outcome, v.DryRun = DryRun, true
		if v.Block.Kind == Allowed { // no Block: a malformed request
			v.Block.Kind, v.Block.Reason = Invalid, Invalid.Label()
		}
	case v.Outcome != Allowed:
	case v.Shadow && v.Wait > 0:
		v.Outcome = ShadowThrottled
	case v.Shadow:
		v.Outcome = Shadow
	case v.Wait > 0:
		v.Outcome = Throttled
	}
}

func (d *Decider) decide(ctx context.Context, req *Request, v *Verdict, start time.Time) {
	if req.Err != nil {
		v.Outcome, v.Err = Invalid, req.Err
		var re *descriptors.RequestError
		if errors.As(req.Err, &re) && re.Descriptor >= 0 {
			v.At = re.Descriptor
		}
		return
	}
	set := d.rules()
	if set == nil {
		return
	}
	c := d.cache(set)
	v.Rules = c.answers
	d.watchConcurrency(req, set, start)
	entries := req.Entries
	var prev *descriptors.Entry // the last entry whose resource and origin were checked: let through
	for i := range entries {
		e := &entries[i]
		if e.Release {
			continue // a release gives back; it is never refused
		}
		if prev != nil && e.Resource == prev.Resource && e.Origin == prev.Origin {
			continue // the same pair as before (descriptors of one request): the same answers
		}
		prev = e
		if rule, ok := set.Authority.Check(e.Resource, e.Origin); !ok {
			v.Outcome, v.At = Authority, i
			v.Block = Block{Kind: Authority, Rule: rule, Resource: e.Resource, Origin: e.Origin,
				Reason: authorityReason(set, rule, e.Origin)}
			return
		}
		if v.Shadow {
			continue
		}
		if rule, blocked := set.Authority.CheckShadow(e.Resource, e.Origin); blocked {
			v.Shadow = true
			v.ShadowBlock = Block{Kind: Authority, Rule: rule, Resource: e.Resource, Origin: e.Origin,
				Reason: authorityReason(set, rule, e.Origin)}
		}
	}
	if set.ParamFlow == nil {
		return
	}

	if d.waiting.Load() >= d.maxWaiting {
		// The queues are full: a request a throttle rule would hold is refused before it takes
		// a place in a queue.
		if i, rule := d.throttled(set, req.Domain, entries); i >= 0 {
			d.queueFull(req, v, set, entries, i, rule)
			return
		}
	}

	hot, st := v.hot[:0], v.st[:0]
	for i := range entries {
		hot = append(hot, entries[i].Entry)
		st = append(st, hotparam.Status{Rule: -1})
	}
	v.hot, v.st = hot, st
	opts := hotparam.CheckOptions{SkipConcurrency: req.SkipConcurrency, Domain: req.Domain}
	if dl, ok := ctx.Deadline(); ok {
		opts.Deadline = start.Add(time.Until(dl) - DeadlineMargin)
	}
	hd := set.ParamFlow.Check(ctx, start, hot, opts, st)
	v.limits = c.answers.appendLimits(v.limits[:0], st)
	v.Limits = v.limits

	if hd.ShadowBlocked && !v.Shadow && validEntry(hd.Shadow.Entry, len(entries)) {
		v.Shadow = true
		v.ShadowBlock = paramBlock(set, entries, &hd.Shadow)
	}
	if !hd.Allowed {
		at := hd.Block.Entry
		if !validEntry(at, len(entries)) {
			at = 0
		}
		v.Outcome, v.At = ParamFlow, at
		v.Block = paramBlock(set, entries, &hd.Block)
		v.Block.Origin = entries[at].Origin
		v.RetryAfter = hd.Block.RetryAfter
		if v.RetryAfter <= 0 {
			v.RetryAfter = st[at].RetryAfter
		}
		return
	}
	if hd.Wait > 0 && d.dryRun {
		return // a dry run delays nothing
	}
	if hd.Wait > 0 {
		if d.waiting.Add(1) > d.maxWaiting {
			// Lost a race for the last places: refused, and the place this request took in its
			// queue given back, as a cancelled wait's is.
			d.waiting.Add(-1)
			set.ParamFlow.Unhold(ctx, d.now(), hd.Hold)
			i, rule := d.throttled(set, req.Domain, entries)
			d.queueFull(req, v, set, entries, max(i, 0), rule)
			return
		}
		defer d.waiting.Add(-1)
	}
	if err := d.hold(ctx, hd.Wait); err != nil {
		if errors.Is(err, errShuttingDown) {
			d.shuttingDown(req, v, set, entries, start.Add(hd.Wait).Sub(d.now()))
			return
		}
		v.Outcome, v.Err = Cancelled, err
		// its turns go back, as far as no other call's move (the Remote's within its own timeout)
		set.ParamFlow.Unhold(context.WithoutCancel(ctx), d.now(), hd.Hold)
		return
	}
	v.Wait = hd.Wait
}

// throttled returns the first entry that is no release and an enforcing throttle rule of set
// applying to the calls of domain names, with that rule's index; -1, -1 when there is none.
func (d *Decider) throttled(set *rulestore.Set, domain string, entries []descriptors.Entry) (entry, rule int) {
	c := d.cache(set)
	scoped := c.domainThrottle[domain] // nil for "" and for a domain without throttle rules
	for i := range entries {
		if entries[i].Release {
			continue
		}
		if r, ok := scoped[entries[i].Resource]; ok {
			return i, r
		}
		if r, ok := c.throttle[entries[i].Resource]; ok {
			return i, r
		}
	}
	return -1, -1
}

// queueFull refuses req because the throttle queues hold Config.MaxWaiting requests.
func (d *Decider) queueFull(req *Request, v *Verdict, set *rulestore.Set, entries []descriptors.Entry, at, rule int) {
	v.Outcome, v.At = QueueFull, at
	v.Block = Block{Kind: ParamFlow, Rule: rule, Resource: entries[at].Resource, Origin: entries[at].Origin,
		Reason: ReasonQueueFull}
	if rs := set.ParamFlow.Rules(); rule >= 0 && rule < len(rs) {
		v.Block.Param = rs[rule].Param
	}
	v.RetryAfter = time.Second
}
