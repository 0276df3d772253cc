package envoyapi

import (
	"context"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/rulestore"
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
	r := &sc.req
	*r = policy.Request{API: APIRateLimit, Domain: req.GetDomain()}
	if len(r.Domain) > descriptors.MaxLen {
		r.Domain = ""
		r.Err = &descriptors.RequestError{Field: "domain", Descriptor: -1, Err: descriptors.ErrValueTooLong}
	} else {
		sc.entries, r.Err = s.mapper.AppendRateLimit(sc.entries[:0], req)
		r.Entries = sc.entries
	}
	if len(r.Entries) > 0 {
		r.RequestID = r.Entries[0].LeaseID
	}
	v := &sc.verdict
	s.policy.Decide(ctx, r, v)

	n := len(req.GetDescriptors())
	switch v.Kind {
	case policy.Invalid:
		resp := newResponse(n)
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
		resp := newResponse(n)
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.Statuses[v.At].Code = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.RawBody = appendBody(nil, &v.Block)
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: HeaderContentType, Value: contentJSON}}
		return resp, nil
	case policy.Cancelled:
		return nil, status.FromContextError(v.Err).Err()
	}
	resp := newResponse(n)
	if v.Statuses != nil {
		fillStatuses(resp, s.ruleNames(v.Rules), v.Statuses)
	}
	if v.Kind == policy.ParamFlow {
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

// newResponse is an OK answer with n OK statuses, allocated together.
func newResponse(n int) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
	}
	slab := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range slab {
		slab[i].Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = &slab[i]
	}
	return resp
}

// fillStatuses sets current_limit (named from names, indexed by rule), limit_remaining and
// duration_until_reset of every status
// whose descriptor a rule applied to.
func fillStatuses(resp *rlsv3.RateLimitResponse, names []string, st []hotparam.Status) {
	applied := 0
	for i := range st {
		if st[i].Rule >= 0 {
			applied++
		}
	}
	if applied == 0 {
		return
	}
	limits := make([]rlsv3.RateLimitResponse_RateLimit, applied)
	durs := make([]durationpb.Duration, applied)
	j := 0
	for i := range st {
		s := &st[i]
		if s.Rule < 0 {
			continue
		}
		l, du := &limits[j], &durs[j]
		j++
		q := quotaOf(s)
		l.RequestsPerUnit, l.Unit = q.limit, q.unit
		if s.Rule < len(names) {
			l.Name = names[s.Rule]
		}
		du.Seconds = q.reset
		ds := resp.Statuses[i]
		ds.CurrentLimit = l
		ds.LimitRemaining = q.remaining
		ds.DurationUntilReset = du
	}
}

// ruleNames returns the names of set's param-flow rules for current_limit, "param_flow[INDEX]
// RESOURCE PARAM", made once per rule set rather than once per answer.
func (s *Server) ruleNames(set *rulestore.Set) []string {
	if c := s.names.Load(); c != nil && c.set == set {
		return c.names
	}
	var rs []hotparam.Rule
	if set.ParamFlow != nil {
		rs = set.ParamFlow.Rules()
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = "param_flow[" + strconv.Itoa(i) + "] " + r.Resource + " " + r.Param
	}
	s.names.Store(&nameCache{set: set, names: names})
	return names
}

// nameCache is the rule names of one rule set.
type nameCache struct {
	set   *rulestore.Set
	names []string
}
