package envoyapi

import (
	"context"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// Check answers Envoy's ext_authz filter: OK (with x-ratelimit-* headers to the upstream when a
// rule applied), 403 when an authority rule blocks, 429 with retry-after, x-ratelimit-* and a
// JSON body when a hot-parameter rule blocks. Concurrency rules are left out.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	start := s.now()
	sc := s.getScratch()
	defer s.putScratch(sc)

	e := &sc.entry
	if err := s.mapper.CheckInto(e, req); err != nil {
		s.record(APICheck, "", "", ResultInvalid, start)
		if descriptors.ClientFault(err) {
			return denied(typev3.StatusCode_BadRequest, nil, errorBody(err.Error())), nil
		}
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	set := s.rules()
	if set == nil {
		s.record(APICheck, "", "", ResultOK, start)
		return allowed(nil), nil
	}
	if rule, ok := set.Authority.Check(e.Resource, e.Origin); !ok {
		bl := block{kind: ResultAuthority, rule: rule, resource: e.Resource, origin: e.Origin,
			reason: authorityReason(set, rule, e.Origin)}
		s.logBlock(APICheck, "", &bl, false)
		s.record(APICheck, "", e.Resource, ResultAuthority, start)
		return denied(typev3.StatusCode_Forbidden, nil, string(appendBody(nil, &bl))), nil
	}
	if set.ParamFlow == nil {
		s.record(APICheck, "", "", ResultOK, start)
		return allowed(nil), nil
	}

	sc.hot = append(sc.hot[:0], hotparam.Entry{Resource: e.Resource, Params: e.Params, Hits: e.Hits, Release: e.Release})
	sc.st = append(sc.st[:0], hotparam.Status{Rule: -1})
	st := &sc.st[0]
	now := start
	d := set.ParamFlow.Check(ctx, now, sc.hot, checkOptions(ctx, now, true), sc.st)

	if d.ShadowBlocked {
		s.logShadow(APICheck, "", set, sc.hot, e.Origin, &d.Shadow)
	}
	if !d.Allowed {
		bl := paramBlock(set, sc.hot, e.Origin, &d.Block)
		s.logBlock(APICheck, "", &bl, false)
		s.record(APICheck, "", e.Resource, ResultParamFlow, start)
		retry := d.Block.RetryAfter
		if retry <= 0 {
			retry = st.RetryAfter
		}
		h := make([]*corev3.HeaderValueOption, 0, 5)
		h = append(h, headerOption(HeaderRetryAfter, itoa(retryAfter(retry))))
		if st.Rule >= 0 {
			h = rateHeaders(h, st)
		}
		return denied(typev3.StatusCode_TooManyRequests, h, string(appendBody(nil, &bl))), nil
	}
	if err := s.hold(ctx, d.Wait); err != nil {
		s.record(APICheck, "", e.Resource, ResultCancelled, start)
		return nil, status.FromContextError(err).Err()
	}
	var h []*corev3.HeaderValueOption
	resource := ""
	if st.Rule >= 0 {
		h = rateHeaders(make([]*corev3.HeaderValueOption, 0, 3), st)
		resource = e.Resource
	}
	result := ResultOK
	if d.ShadowBlocked {
		result, resource = ResultShadow, e.Resource
	}
	s.record(APICheck, "", resource, result, start)
	return allowed(h), nil
}

func allowed(h []*corev3.HeaderValueOption) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: h}},
	}
}

func denied(code typev3.StatusCode, h []*corev3.HeaderValueOption, body string) *authv3.CheckResponse {
	h = append(h, headerOption(HeaderContentType, contentJSON))
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: code},
			Headers: h,
			Body:    body,
		}},
	}
}

// paramBlock describes a hot-parameter block of one of entries.
func paramBlock(set *rulestore.Set, entries []hotparam.Entry, origin string, b *hotparam.Block) block {
	bl := block{kind: ResultParamFlow, rule: b.Rule, origin: origin, param: b.Param, value: b.Value,
		reason: reasonName(b.Reason)}
	if b.Entry >= 0 && b.Entry < len(entries) {
		bl.resource = entries[b.Entry].Resource
	}
	if r, ok := paramRule(set, b.Rule); ok {
		bl.resource = r.Resource
	}
	return bl
}

func (s *Server) logBlock(api, domain string, bl *block, shadow bool) {
	msg := "blocked"
	if shadow {
		msg = "shadow rule would block"
	}
	ce := s.log.Check(zap.InfoLevel, msg)
	if ce == nil {
		return
	}
	ce.Write(
		zap.String("api", api),
		zap.String("domain", domain),
		zap.String("blocked", bl.kind),
		zap.Int("rule", bl.rule),
		zap.String("resource", bl.resource),
		zap.String("origin", bl.origin),
		zap.String("param", bl.param),
		zap.String("value", bl.value),
		zap.String("reason", bl.reason),
	)
}

func (s *Server) logShadow(api, domain string, set *rulestore.Set, entries []hotparam.Entry, origin string, b *hotparam.Block) {
	if ce := s.log.Check(zap.InfoLevel, "shadow rule would block"); ce == nil {
		return
	}
	bl := paramBlock(set, entries, origin, b)
	s.logBlock(api, domain, &bl, true)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
