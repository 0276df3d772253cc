package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi"
	"github.com/extauthz/extauthz/internal/envoysim"
	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// req is an HTTP request as it reaches Envoy: method, path with query, the TCP peer's IP, then
// header name/value pairs (lower-case names). Its x-request-id names the request for the test
// (see testRequestID); identical requests are one stream (see accept).
func req(method, path, client string, kv ...string) envoysim.Request {
	h := map[string][]string{"x-request-id": {"e2e-" + strings.ReplaceAll(path, "/", "_")}}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return envoysim.Request{
		Method:  method,
		Path:    path,
		Host:    "api.example:8080",
		Headers: h,
		Remote:  netip.AddrPortFrom(netip.MustParseAddr(client), 40000),
	}
}

// testRequestID is the x-request-id the emulated Envoy generates for r: the one the test wrote
// in r, so that logs and lease ids name the test's requests (Envoy replaces a client's id on
// an edge request, with an id of its own choosing: here the test chooses it), else a UUID.
// TestConnectionManagerHeaders checks the replacement with Envoy's own generator.
func testRequestID(r envoysim.Request) string {
	if v := r.Headers["x-request-id"]; len(v) > 0 && v[0] != "" {
		return v[0]
	}
	return envoysim.UUID()
}

// filters returns the two filters' configs from c.
func filters(c *envoysim.Config) (*extauthzv3.ExtAuthz, *ratelimitv3.RateLimit, error) {
	authz, rl, err := c.Filters()
	if err == nil && (authz == nil || rl == nil) {
		err = fmt.Errorf("%s lacks the ext_authz or the ratelimit filter", c.File)
	}
	return authz, rl, err
}

// streams holds the stream of each request sent so far, by the request's every field: a test
// that sends the same request again (a request's stream-done release after its acquire) means
// the same stream, with the same stream id and x-request-id.
var streams sync.Map // string -> *envoysim.Stream

// accept is the stream Envoy's connection manager makes of r (the same one for an identical
// request).
func accept(t testing.TB, r envoysim.Request) *envoysim.Stream {
	t.Helper()
	key := fmt.Sprintf("%+v", r)
	if s, ok := streams.Load(key); ok {
		return s.(*envoysim.Stream)
	}
	s, err := envoy.Accept(r)
	if err != nil {
		t.Fatalf("Envoy does not pass %s %s to its filters: %v", r.Method, r.Path, err)
	}
	got, _ := streams.LoadOrStore(key, s)
	return got.(*envoysim.Stream)
}

// checkRequest is the CheckRequest Envoy's ext_authz filter sends for r.
func checkRequest(t testing.TB, r envoysim.Request) *authv3.CheckRequest {
	t.Helper()
	cr, err := envoy.CheckRequest(accept(t, r), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cr == nil {
		t.Fatalf("ext_authz is disabled for %s %s", r.Method, r.Path)
	}
	return cr
}

// check sends the CheckRequest Envoy would send for r, with the ext_authz filter's timeout.
func (s *service) check(t testing.TB, r envoysim.Request) *authv3.CheckResponse {
	t.Helper()
	cr := checkRequest(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), authzFilter.GetGrpcService().GetTimeout().AsDuration())
	defer cancel()
	resp, err := s.authz.Check(ctx, cr)
	if err != nil {
		t.Fatalf("Check %s %s: %v", r.Method, r.Path, err)
	}
	return resp
}

// identity is the dynamic metadata an allowed Check of extauthz gives r's stream (its
// resource and origin, namespace envoyapi.MetadataNamespace), which envoy.yaml's rate-limit
// actions read: the CheckRequest Envoy sends for r, mapped as the service maps it with
// envoy-config/extauthz.yaml. (Envoy calls the rate-limit service only after ext_authz
// allowed the request; the suite sends rate-limit calls of refused requests too.)
func identity(t testing.TB, r envoysim.Request) map[string]*structpb.Struct {
	t.Helper()
	mapping.once.Do(func() {
		var cfg config.Config
		if cfg, mapping.err = config.Load(config.Source{File: extauthzYAML}); mapping.err == nil {
			mapping.m, mapping.err = descriptors.New(cfg.Mapping)
		}
	})
	if mapping.err != nil {
		t.Fatalf("%s: %v", extauthzYAML, mapping.err)
	}
	cr, err := envoy.CheckRequest(accept(t, r), time.Now())
	if err != nil || cr == nil {
		return nil // no Check for this stream: no metadata
	}
	st := envoytest.Identity(mapping.m, cr)
	if st == nil {
		return nil
	}
	return map[string]*structpb.Struct{envoyapi.MetadataNamespace: st}
}

// mapping is the service's mapping of envoy-config/extauthz.yaml, loaded once.
var mapping struct {
	once sync.Once
	m    *descriptors.Mapper
	err  error
}

// limitRequest builds the RateLimitRequest Envoy would send for r: the request-path
// descriptors, or with streamDone those sent when the stream ends, from r's stream with the
// identity ext_authz gave it. It fails t when the route produces none.
func limitRequest(t testing.TB, r envoysim.Request, streamDone bool) *rlsv3.RateLimitRequest {
	t.Helper()
	st := accept(t, r)
	if st.Route == nil {
		t.Fatalf("no route for %s %s", r.Method, r.Path)
	}
	withIdentity := *st // the cached stream is shared: its copy carries the metadata
	withIdentity.Request.DynamicMetadata = identity(t, r)
	st = &withIdentity
	ds, err := envoy.Descriptors(st)
	if err != nil {
		t.Fatal(err)
	}
	out := &rlsv3.RateLimitRequest{Domain: rlFilter.GetDomain()}
	for _, d := range ds {
		if d.OnStreamDone == streamDone {
			out.Descriptors = append(out.Descriptors, d.Proto())
		}
	}
	if len(out.Descriptors) == 0 {
		t.Fatalf("route %q produces no descriptors for %s %s (stream done %v)", st.Route.GetName(), r.Method, r.Path, streamDone)
	}
	return out
}

// limit sends rr with the ratelimit filter's timeout.
func (s *service) limit(t testing.TB, rr *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.limitErr(rr)
	if err != nil {
		t.Fatalf("ShouldRateLimit %v: %v", rr.GetDescriptors(), err)
	}
	return resp
}

func (s *service) limitErr(rr *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rlFilter.GetTimeout().AsDuration())
	defer cancel()
	return s.rls.ShouldRateLimit(ctx, rr)
}

// allowed reports whether r passes the rate-limit path.
func (s *service) allowed(t testing.TB, r envoysim.Request) bool {
	t.Helper()
	return s.limit(t, limitRequest(t, r, false)).GetOverallCode() == rlsv3.RateLimitResponse_OK
}

// checkCode is the HTTP status Envoy would answer for a CheckResponse: 200 when allowed.
func checkCode(t testing.TB, resp *authv3.CheckResponse) int {
	t.Helper()
	if codes.Code(resp.GetStatus().GetCode()) == codes.OK {
		if resp.GetDeniedResponse() != nil {
			t.Errorf("Check: OK status with a denied response %v", resp.GetDeniedResponse())
		}
		return 200
	}
	d := resp.GetDeniedResponse()
	if d == nil {
		t.Fatalf("Check: status %v without a denied response", resp.GetStatus())
	}
	return int(d.GetStatus().GetCode())
}

// headerOf returns the value of header name in hs ("" when absent).
func headerOf(hs []*corev3.HeaderValueOption, name string) string {
	for _, h := range hs {
		if strings.EqualFold(h.GetHeader().GetKey(), name) {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}
