package envoyapi

import (
	"context"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi/wire"
	"github.com/extauthz/extauthz/policy"
)

// Check answers Envoy's ext_authz filter: OK (with x-ratelimit-* headers for the client, in
// response_headers_to_add, when a rule applied; nothing is added upstream; the headers the
// mapping names in HeadersToRemove taken off the request; the resolved identity as dynamic
// metadata, see identity), 403 when an authority rule blocks, 429 with retry-after, x-ratelimit-* and a
// JSON body when a hot-parameter rule blocks, 400 with a JSON body naming the problem for a
// malformed request. Concurrency rules are left out.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	sc := s.getScratch()
	defer s.putScratch(sc)
	resp, err := s.check(ctx, req, sc)
	if s.reporter != nil {
		s.reporter.Report(ctx, req, resp, &sc.verdict, err)
	}
	return resp, err
}

// check decides req and renders the verdict, in sc.
func (s *Server) check(ctx context.Context, req *authv3.CheckRequest, sc *scratch) (*authv3.CheckResponse, error) {
	if cap(sc.entries) == 0 {
		sc.entries = make([]descriptors.Entry, 1)
	}
	sc.entries = sc.entries[:1]
	r := &sc.req
	*r = policy.Request{API: policy.APICheck, Entries: sc.entries, SkipConcurrency: true,
		RequestID: req.GetAttributes().GetRequest().GetHttp().GetHeaders()["x-request-id"]}
	r.Err = s.mapper.CheckInto(&sc.entries[0], req)
	v := &sc.verdict
	s.policy.Decide(ctx, r, v)

	switch v.Outcome {
	case policy.Invalid:
		return denied(typev3.StatusCode_BadRequest, nil, errorBody(v.Err.Error())), nil
	case policy.Authority:
		return denied(typev3.StatusCode_Forbidden, nil, string(appendBody(nil, &v.Block))), nil
	case policy.ParamFlow, policy.QueueFull, policy.ShuttingDown:
		h := make([]*corev3.HeaderValueOption, 0, 6)
		h = append(h, headerOption(HeaderRetryAfter, itoa(retryAfter(v.RetryAfter))))
		if isGRPC(req) {
			// Envoy answers a gRPC call refused with 429 as UNAVAILABLE, which gRPC clients
			// retry; RESOURCE_EXHAUSTED they do not (the rate-limit filter's
			// rate_limited_as_resource_exhausted, for ext_authz).
			h = append(h, headerOption(HeaderGRPCStatus, grpcResourceExhausted))
		}
		if len(v.Limits) > 0 && v.Limits[0].Rule >= 0 {
			h = rateHeaders(h, &v.Limits[0])
		}
		return denied(typev3.StatusCode_TooManyRequests, h, string(appendBody(nil, &v.Block))), nil
	case policy.Cancelled:
		return nil, status.FromContextError(v.Err).Err()
	}
	var st *policy.Limit
	if len(v.Limits) > 0 && v.Limits[0].Rule >= 0 {
		st = &v.Limits[0]
	}
	a := s.allowed(st, s.mapper.HeadersToRemove())
	s.setIdentity(a, &sc.entries[0], v.Rules)
	return a.Response(), nil
}

// allowed is an OK answer from the codec's pool: the x-ratelimit-* headers of st (when not
// nil) for the client, remove taken off the request before the upstream.
func (s *Server) allowed(st *policy.Limit, remove []string) *wire.Allowed {
	a := s.codec.Allowed(remove)
	// response_headers_to_add reach the client (Envoy's ext_authz Filter::onComplete keeps
	// them for encodeHeaders); OkHttpResponse.headers would be added to the request upstream.
	if st != nil {
		rateHeaderValues(a.ResponseHeaders(), st)
	}
	return a
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

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// HeaderGRPCStatus is the status of a gRPC call, which a denied Check of a gRPC request sets.
const HeaderGRPCStatus = "grpc-status"

// grpcResourceExhausted is codes.ResourceExhausted as grpc-status spells it.
var grpcResourceExhausted = strconv.Itoa(int(codes.ResourceExhausted))

// isGRPC reports whether the checked request is a gRPC call (its content-type, which Envoy
// sends when the ext_authz filter's allowed_headers lets it).
func isGRPC(req *authv3.CheckRequest) bool {
	ct := req.GetAttributes().GetRequest().GetHttp().GetHeaders()["content-type"]
	return strings.HasPrefix(ct, "application/grpc")
}
