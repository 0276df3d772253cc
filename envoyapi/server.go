// Package envoyapi serves Envoy's ext_authz Check and rate-limit ShouldRateLimit calls over the
// rule engines: it maps the request to entries, runs the authority rules and then the
// hot-parameter rules, and answers in Envoy's terms.
//
// Malformed requests never panic and never hang, and none is answered with a gRPC error: an
// error is what Envoy's failure mode turns into an allow (failure_mode_deny: false on the
// rate-limit filter), so a client could slip past the rules by sending something malformed.
// Every request the mapping refuses (see descriptors.RequestError: no HTTP attributes, no
// descriptors or more than descriptors.MaxDescriptors, more than descriptors.MaxEntries entries
// in a descriptor, an empty or over-long key, a value, resource, origin or domain longer than
// descriptors.MaxLen, a param with more than descriptors.MaxValues values, a hits_addend above
// the largest int64) is refused, counted as policy.Invalid and answered with a JSON body
// {"error": ...} naming the field at fault: ext_authz denies it with HTTP 400; the rate-limit
// service answers OVER_LIMIT, with the descriptor at fault OVER_LIMIT and the others OK, or
// every descriptor OVER_LIMIT when the request as a whole is at fault. Nothing is consumed.
//
// A request whose resource no rule names is allowed. A descriptor's limit override is ignored:
// limits come from the rules. The ext_authz path leaves concurrency rules
// out (it has no completion signal); only the rate-limit path, whose stream-done descriptors
// carry is_negative_hits, acquires and releases concurrency.
//
// The decision itself is package policy's: the handlers here translate Envoy's request into a
// policy.Request and render the policy.Verdict in Envoy's terms. In a dry run
// (Options.Policy.DryRun) nothing above is refused: every call is answered as allowed, with
// the real x-ratelimit numbers.
//
// A throttled request is answered after its wait, never past the call's deadline: the deadline,
// less policy.DeadlineMargin, is passed to the limiter, which blocks at once (consuming nothing) a
// request whose wait would end later. A call cancelled during its wait returns the context's
// error, and gives back the turns it was given as far as that moves no other call's (see
// hotparam.Limiter.Unhold).
package envoyapi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi/wire"
	"github.com/extauthz/extauthz/policy"
)

// Options configure a Server.
type Options struct {
	// Mapper maps requests to entries; nil means descriptors.New(descriptors.Config{}).
	Mapper *descriptors.Mapper
	// Policy configures the decisions: the rules in force (required), the clock, the metrics
	// and the decision section of the config (throttle queue cap, dry run).
	Policy policy.Options
	// Redact gives the value of a param as it may be shown outside the service (the keyed
	// hash of a sensitive param's, redact.Redactor.Value); nil shows values as they are. An
	// allowed Check's identity metadata goes through it.
	Redact func(param, value string) string
	// Codec is the server's gRPC codec (grpc.ForceServerCodecV2), whose pools the rate-limit
	// answers and the allowed Check answers are taken from so that it reuses them once encoded; nil means a Codec of the
	// Server's own, whose answers are then never given back by an encoding (they are left to
	// the garbage collector).
	Codec *wire.Codec
	// Reporter is told of every Check and ShouldRateLimit call once it is answered; nil tells
	// no one.
	Reporter Reporter
}

// Reporter is told of each call once it is answered: the request, the answer or the error,
// and the verdict the answer renders (whose Audit is the call's audit record). It is called on
// the call's goroutine, before the answer is returned, and must keep nothing of v, resp or req
// after it returns. Package observe's Observer is one.
type Reporter interface {
	Report(ctx context.Context, req, resp any, v *policy.Verdict, err error)
}

// Server implements authv3.AuthorizationServer and rlsv3.RateLimitServiceServer. It is safe
// for concurrent use.
type Server struct {
	mapper     *descriptors.Mapper
	policy     *policy.Decider
	pool       sync.Pool                  // of *scratch
	limitCache atomic.Pointer[limitCache] // current_limit messages of the last rule set seen
	resets     resetCache                 // duration_until_reset messages
	redactFn   func(param, value string) string
	codec      *wire.Codec // the rate-limit and allowed Check answers come from its pools
	reporter   Reporter    // nil: none
}

var (
	_ authv3.AuthorizationServer   = (*Server)(nil)
	_ rlsv3.RateLimitServiceServer = (*Server)(nil)
)

// scratch is one call's reusable memory.
type scratch struct {
	req     policy.Request
	verdict policy.Verdict
	entries []descriptors.Entry
}

// New builds a Server. It panics if opts.Policy.Rules is nil.
func New(opts Options) *Server {
	if opts.Policy.Rules == nil {
		panic("envoyapi: Options.Policy.Rules is nil")
	}
	s := &Server{mapper: opts.Mapper, redactFn: opts.Redact, codec: opts.Codec, reporter: opts.Reporter,
		policy: policy.New(opts.Policy)}
	if s.mapper == nil {
		m, err := descriptors.New(descriptors.Config{})
		if err != nil {
			panic("envoyapi: default mapping: " + err.Error())
		}
		s.mapper = m
	}
	if s.codec == nil {
		s.codec = wire.NewCodec()
	}
	s.pool.New = func() any { return new(scratch) }
	return s
}

// Waiting is how many requests are held in throttle queues now, both APIs together.
func (s *Server) Waiting() int { return s.policy.Waiting() }

// Drain says the server stops at deadline: a throttled call whose turn comes later is answered
// at once, OVER_LIMIT (429 on Check) with reason shutting_down and retry-after, rather than
// cut off by the stop with a gRPC error, which Envoy's rate-limit filter admits by default
// (see policy.Decider.Drain).
func (s *Server) Drain(deadline time.Time) { s.policy.Drain(deadline) }

// Register registers the Authorization and RateLimitService services on g.
func (s *Server) Register(g *grpc.Server) {
	authv3.RegisterAuthorizationServer(g, s)
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

func (s *Server) getScratch() *scratch { return s.pool.Get().(*scratch) }

// scratchCap is the capacity a scratch's entries get for a request of n descriptors: the next
// power of two, at least 8, at most descriptors.MaxDescriptors, so that they grow a few times
// at most and are kept by putScratch.
func scratchCap(n int) int {
	c := 8
	for c < n {
		c *= 2
	}
	return min(c, descriptors.MaxDescriptors)
}

func (s *Server) putScratch(sc *scratch) {
	// Drop what a freak request grew, so that the pool stays small.
	if cap(sc.entries) > descriptors.MaxDescriptors || (len(sc.entries) > 0 && cap(sc.entries[0].Params) > 64) {
		return
	}
	sc.req = policy.Request{}
	sc.verdict.Rules, sc.verdict.Err = nil, nil // keep no rule set alive from the pool
	s.pool.Put(sc)
}
