package envoyapi

import (
	"context"
	"errors"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// ShouldRateLimit answers Envoy's rate-limit filter. Every descriptor is one entry; all of them
// are checked in one all-or-nothing call, after the authority rules (which skip releases). The
// answer has one status per descriptor: OVER_LIMIT for the one that blocked, OK for the
// others, with current_limit, limit_remaining and duration_until_reset where a rule applied.
// An OVER_LIMIT answer carries the JSON body (raw_body) and, for a hot-parameter block, a
// retry-after header.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := s.now()
	domain := req.GetDomain()
	if len(domain) > descriptors.MaxLen {
		s.record(APIRateLimit, "", "", ResultInvalid, start)
		return nil, status.Error(codes.InvalidArgument, "bad request: domain: "+descriptors.ErrValueTooLong.Error())
	}
	sc := s.getScratch()
	defer s.putScratch(sc)

	entries, err := s.mapper.AppendRateLimit(sc.entries[:0], req)
	sc.entries = entries
	if err != nil {
		s.record(APIRateLimit, domain, "", ResultInvalid, start)
		var re *descriptors.RequestError
		if descriptors.ClientFault(err) && errors.As(err, &re) && re.Descriptor >= 0 {
			resp := newResponse(len(req.GetDescriptors()))
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.Statuses[re.Descriptor].Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.RawBody = []byte(errorBody(err.Error()))
			resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: HeaderContentType, Value: contentJSON}}
			return resp, nil
		}
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	n := len(entries)
	set := s.rules()
	if set == nil {
		s.record(APIRateLimit, domain, "", ResultOK, start)
		return newResponse(n), nil
	}
	for i := range entries {
		e := &entries[i]
		if e.Release {
			continue // a release gives back; it is never refused
		}
		if rule, ok := set.Authority.Check(e.Resource, e.Origin); !ok {
			bl := block{kind: ResultAuthority, rule: rule, resource: e.Resource, origin: e.Origin,
				reason: authorityReason(set, rule, e.Origin)}
			s.logBlock(APIRateLimit, domain, &bl, false)
			s.record(APIRateLimit, domain, e.Resource, ResultAuthority, start)
			resp := newResponse(n)
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.Statuses[i].Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.RawBody = appendBody(nil, &bl)
			resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: HeaderContentType, Value: contentJSON}}
			return resp, nil
		}
	}
	if set.ParamFlow == nil {
		s.record(APIRateLimit, domain, "", ResultOK, start)
		return newResponse(n), nil
	}

	hot, st := sc.hot[:0], sc.st[:0]
	for i := range entries {
		e := &entries[i]
		hot = append(hot, hotparam.Entry{Resource: e.Resource, Params: e.Params, Hits: e.Hits, Release: e.Release,
			LeaseID: e.LeaseID})
		st = append(st, hotparam.Status{Rule: -1})
	}
	sc.hot, sc.st = hot, st
	now := start
	d := set.ParamFlow.Check(ctx, now, hot, checkOptions(ctx, now, false), st)

	if d.ShadowBlocked && validEntry(d.Shadow.Entry, n) {
		s.logShadow(APIRateLimit, domain, set, hot, entries[d.Shadow.Entry].Origin, &d.Shadow)
	}
	resp := newResponse(n)
	fillStatuses(resp, s.ruleNames(set), st)
	if !d.Allowed {
		at := d.Block.Entry
		if !validEntry(at, n) {
			at = 0
		}
		bl := paramBlock(set, hot, entries[at].Origin, &d.Block)
		s.logBlock(APIRateLimit, domain, &bl, false)
		s.record(APIRateLimit, domain, bl.resource, ResultParamFlow, start)
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.Statuses[at].Code = rlsv3.RateLimitResponse_OVER_LIMIT
		retry := d.Block.RetryAfter
		if retry <= 0 {
			retry = st[at].RetryAfter
		}
		resp.RawBody = appendBody(nil, &bl)
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: HeaderContentType, Value: contentJSON},
			{Key: HeaderRetryAfter, Value: itoa(retryAfter(retry))},
		}
		return resp, nil
	}
	if err := s.hold(ctx, d.Wait); err != nil {
		s.record(APIRateLimit, domain, "", ResultCancelled, start)
		return nil, status.FromContextError(err).Err()
	}
	resource := ""
	for i := range st {
		if st[i].Rule >= 0 {
			resource = entries[i].Resource
			break
		}
	}
	result := ResultOK
	if d.ShadowBlocked {
		result = ResultShadow
		if validEntry(d.Shadow.Entry, n) {
			resource = entries[d.Shadow.Entry].Resource
		}
	}
	s.record(APIRateLimit, domain, resource, result, start)
	return resp, nil
}

func validEntry(i, n int) bool { return i >= 0 && i < n }

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
		l.RequestsPerUnit, l.Unit = currentLimit(s.Limit, s.Duration)
		if s.Rule < len(names) {
			l.Name = names[s.Rule]
		}
		reset := max(s.ResetAfter, 0)
		du.Seconds = int64(reset / 1e9)
		du.Nanos = int32(reset % 1e9)
		ds := resp.Statuses[i]
		ds.CurrentLimit = l
		ds.LimitRemaining = clamp32(s.Remaining)
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
