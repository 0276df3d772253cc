package envoyapi

import (
	"context"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/policy"
)

// ShouldRateLimit answers Envoy's rate-limit filter. Every descriptor is one entry; all of them
// are checked in one all-or-nothing call, after the authority rules (which skip releases). The
// answer has one status per descriptor: OVER_LIMIT for the one that blocked, OK for the
// others, with current_limit, limit_remaining and duration_until_reset where a rule applied.
// An OVER_LIMIT answer carries the JSON body (raw_body) and, for a hot-parameter block, a
// retry-after header.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	sc := s.getScratch()
	defer s.putScratch(sc)
	resp, err := s.shouldRateLimit(ctx, req, sc)
	if s.reporter != nil {
		s.reporter.Report(ctx, req, resp, &sc.verdict, err)
	}
	return resp, err
}

// shouldRateLimit decides req and renders the verdict, in sc.
func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, sc *scratch) (*rlsv3.RateLimitResponse, error) {
	r := &sc.req
	*r = policy.Request{API: policy.APIRateLimit, Domain: req.GetDomain()}
	if len(r.Domain) > descriptors.MaxLen {
		r.Domain = ""
		r.Err = &descriptors.RequestError{Field: "domain", Descriptor: -1, Err: descriptors.ErrValueTooLong}
	} else {
		if n := len(req.GetDescriptors()); n > cap(sc.entries) && n <= descriptors.MaxDescriptors {
			// Room for them all at once: grown by append, the entries would pass
			// MaxDescriptors' capacity (append rounds up), and putScratch would drop them.
			sc.entries = make([]descriptors.Entry, 0, scratchCap(n))
		}
		sc.entries, r.Err = s.mapper.AppendRateLimit(sc.entries[:0], req)
		r.Entries = sc.entries
	}
	if len(r.Entries) > 0 {
		r.RequestID = r.Entries[0].LeaseID
	}
	v := &sc.verdict
	s.policy.Decide(ctx, r, v)

	n := len(req.GetDescriptors())
	switch v.Outcome {
	case policy.Invalid:
		resp := s.codec.Answer(n)
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		for i, ds := range resp.Statuses {
			if v.At < 0 || i == v.At {
				ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
		resp.RawBody = []byte(errorBody(v.Err.Error()))
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: HeaderContentType, Value: contentJSON}}
		return resp, nil
	case policy.Authority:
		resp := s.codec.Answer(n)
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.Statuses[v.At].Code = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.RawBody = appendBody(nil, &v.Block)
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: HeaderContentType, Value: contentJSON}}
		return resp, nil
	case policy.Cancelled:
		return nil, status.FromContextError(v.Err).Err()
	}
	resp := s.codec.Answer(n)
	if v.Limits != nil {
		fillStatuses(resp, s.limits(v.Rules), &s.resets, v.Limits)
	}
	if v.Outcome == policy.ParamFlow || v.Outcome == policy.QueueFull || v.Outcome == policy.ShuttingDown {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.Statuses[v.At].Code = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.RawBody = appendBody(nil, &v.Block)
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: HeaderContentType, Value: contentJSON},
			{Key: HeaderRetryAfter, Value: itoa(retryAfter(v.RetryAfter))},
		}
	}
	return resp, nil
}

// fillStatuses sets current_limit, limit_remaining and duration_until_reset of every status
// whose descriptor a rule applied to. The current_limit and duration_until_reset messages are
// shared between answers (see limitCache and resetCache): they are never changed once made,
// and gRPC only reads them.
func fillStatuses(resp *rlsv3.RateLimitResponse, limits *limitCache, resets *resetCache, st []policy.Limit) {
	for i := range st {
		s := &st[i]
		if s.Rule < 0 {
			continue
		}
		q := quotaOf(s)
		ds := resp.Statuses[i]
		ds.CurrentLimit = limits.get(s, &q)
		ds.LimitRemaining = q.remaining
		ds.DurationUntilReset = resets.get(q.reset)
	}
}

// limits returns the current_limit cache of rules, made once per rule set.
func (s *Server) limits(rules *policy.Rules) *limitCache {
	if c := s.limitCache.Load(); c != nil && c.rules == rules {
		return c
	}
	c := &limitCache{rules: rules, limits: make([]atomic.Pointer[rlsv3.RateLimitResponse_RateLimit], rules.LimitRules())}
	s.limitCache.Store(c)
	return c
}

// limitCache holds, per param-flow rule of one rule set, the current_limit message of the
// rule's own count (made on first use), named as policy.Limit.Name names it.
type limitCache struct {
	rules  *policy.Rules
	limits []atomic.Pointer[rlsv3.RateLimitResponse_RateLimit]
}

// get returns the current_limit of q under st's rule: the shared one when q states it, a new
// one (an exception item's count) otherwise.
func (c *limitCache) get(st *policy.Limit, q *quota) *rlsv3.RateLimitResponse_RateLimit {
	rule := st.Rule
	if rule >= len(c.limits) {
		return &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: q.limit, Unit: q.unit}
	}
	p := &c.limits[rule]
	l := p.Load()
	if l != nil && l.RequestsPerUnit == q.limit && l.Unit == q.unit {
		return l
	}
	n := &rlsv3.RateLimitResponse_RateLimit{Name: st.Name, RequestsPerUnit: q.limit, Unit: q.unit}
	if l == nil {
		p.CompareAndSwap(nil, n)
	}
	return n
}

// resetCache holds the shared duration_until_reset messages of whole seconds below its
// length, made on first use. Its zero value is empty; it is safe for concurrent use.
type resetCache [3601]atomic.Pointer[durationpb.Duration]

// get is a duration_until_reset of sec whole seconds, shared when it is small.
func (c *resetCache) get(sec int64) *durationpb.Duration {
	if sec < 0 || sec >= int64(len(c)) {
		return &durationpb.Duration{Seconds: sec}
	}
	p := &c[sec]
	if d := p.Load(); d != nil {
		return d
	}
	d := &durationpb.Duration{Seconds: sec}
	if p.CompareAndSwap(nil, d) {
		return d
	}
	return p.Load()
}
