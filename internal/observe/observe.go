// Package observe reports each decision of the Check and ShouldRateLimit calls: a gRPC server
// interceptor starts and ends each call's trace span, and the handler reports the call once
// answered (Observer.Report, with the verdict whose audit record says what was decided): the
// decision is logged (every block, and a sample of the allows) and put on the call's span.
//
// The request id and the trace context come from what Envoy sends: the CheckRequest's HTTP
// request (its id, its headers) and the gRPC metadata of either call. Only this package, besides
// envoyapi and descriptors, reads Envoy's protos, and only to find those.
package observe

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/internal/audit"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/tracing"
)

// API names, as the decision log's api field and the audit.Decision spell them.
const (
	APICheck     = "check"
	APIRateLimit = "ratelimit"
)

// HeaderRequestID is Envoy's request id header, the key an access log joins on
// (%REQ(X-REQUEST-ID)%).
const HeaderRequestID = "x-request-id"

// MaxRequestIDLen is the most bytes of a request id the log and the trace keep: Envoy's own
// ids are UUIDs (36 bytes), and a client's longer one costs no more than this per line.
const MaxRequestIDLen = 128

// DefaultLeaseKey is the descriptor key whose value is the request id when Options.LeaseKey is
// empty (descriptors.DefaultLeaseKey).
const DefaultLeaseKey = "lease_id"

// Options configure an Observer.
type Options struct {
	// Log receives the decision log at info; nil logs nothing.
	Log *zap.Logger
	// AllowedEvery logs one allowed call in AllowedEvery (the first, then every
	// AllowedEvery-th); 0 logs none. Blocks are always logged.
	AllowedEvery uint64
	// Redact shows a param's value as the log and the trace may carry it; nil shows it as is.
	Redact func(param, value string) string
	// LeaseKey is the descriptor key naming a concurrency lease: Envoy's x-request-id, the
	// request id of a ShouldRateLimit call whose metadata carries none. "" means
	// DefaultLeaseKey.
	LeaseKey string
	// Tracer starts one span per call, a child of the trace context Envoy sent, ended with the
	// decision as attributes; nil starts none (the trace id Envoy sent is still logged).
	Tracer trace.Tracer
	// Propagator reads Envoy's trace context; nil means tracing.Propagator (W3C and B3).
	Propagator propagation.TextMapPropagator
	// MaxPerSecond caps the decision lines written in a second of Now, blocks and sampled
	// allows together; those over it are left out, and once the second is over one line
	// (MsgSuppressed, at warn) says how many. 0 means DefaultMaxPerSecond.
	MaxPerSecond int
	// OnSuppressed, when set, is told how many lines each MsgSuppressed line reports (for a
	// counter).
	OnSuppressed func(n uint64)
	// Now is the clock of MaxPerSecond; nil means time.Now.
	Now func() time.Time
}

// Observer reports decisions. It is safe for concurrent use.
type Observer struct {
	tracer       trace.Tracer // nil: no spans
	prop         propagation.TextMapPropagator
	log          *zap.Logger
	allowedEvery uint64
	redact       func(param, value string) string
	leaseKey     string
	allowed      atomic.Uint64 // allowed calls seen, for the sampling
	now          func() time.Time
	budget       budget // lines per second
	onSuppressed func(n uint64)
}

// New returns an Observer.
func New(opts Options) *Observer {
	o := &Observer{log: opts.Log, allowedEvery: opts.AllowedEvery, redact: opts.Redact, leaseKey: opts.LeaseKey,
		tracer: opts.Tracer, prop: opts.Propagator}
	if o.leaseKey == "" {
		o.leaseKey = DefaultLeaseKey
	}
	if o.prop == nil {
		o.prop = tracing.Propagator()
	}
	o.now, o.onSuppressed = opts.Now, opts.OnSuppressed
	if o.now == nil {
		o.now = time.Now
	}
	o.budget.max = opts.MaxPerSecond
	if o.budget.max <= 0 {
		o.budget.max = DefaultMaxPerSecond
	}
	return o
}

// Unary is the interceptor: for Check and ShouldRateLimit, with a Tracer, it starts the call's
// span before the handler (which reports the decision on it, see Report) and ends it after;
// other methods, and every call without a Tracer, pass through untouched.
func (o *Observer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if o.tracer == nil || (info.FullMethod != authv3.Authorization_Check_FullMethodName &&
		info.FullMethod != rlsv3.RateLimitService_ShouldRateLimit_FullMethodName) {
		return handler(ctx, req)
	}
	ctx, span := o.tracer.Start(o.extract(ctx, req), strings.TrimPrefix(info.FullMethod, "/"), trace.WithSpanKind(trace.SpanKindServer))
	resp, err := handler(ctx, req)
	endSpan(span, err)
	return resp, err
}

// apiOf is the api of a Check or ShouldRateLimit request, "" for any other message.
func apiOf(req any) string {
	switch req.(type) {
	case *authv3.CheckRequest:
		return APICheck
	case *rlsv3.RateLimitRequest:
		return APIRateLimit
	}
	return ""
}

// Report reports one Check or ShouldRateLimit call, once answered with resp or err: v's audit
// record goes to the decision log (every block, a sample of the allows) and onto the call's
// span (the one Unary started in ctx). It keeps nothing of its arguments. Report implements
// envoyapi.Reporter.
func (o *Observer) Report(ctx context.Context, req, resp any, v *policy.Verdict, err error) {
	d := v.Audit()
	o.report(ctx, req, resp, &d, err)
}

// report reports d, the decision of the call req answered with resp or err.
func (o *Observer) report(ctx context.Context, req, resp any, d *audit.Decision, err error) {
	o.complete(d, apiOf(req), resp, err)
	// What only a report needs (the request id, Envoy's trace context) is read only for a call
	// that is reported: most calls are allowed and neither logged nor traced.
	var at time.Time // the line's time, as the cap on lines a second counted it
	logged := o.logs(d)
	if logged {
		logged, at = o.admit()
	}
	var span trace.Span // the call's, started by Unary; nil without a Tracer
	if o.tracer != nil {
		span = trace.SpanFromContext(ctx)
	}
	recording := span != nil && span.IsRecording()
	if logged || recording {
		o.fillRequestID(ctx, d, req)
	}
	if recording {
		o.describeSpan(span, d)
	}
	if logged {
		sc := trace.SpanContextFromContext(ctx) // the call's span, or none without a tracer
		if span == nil {
			sc = trace.SpanContextFromContext(o.extract(ctx, req)) // the trace Envoy sent
		}
		o.logDecision(d, at, sc, err)
	}
}

// complete fills what the decision path left empty: the api and a result read from the answer
// (when the decision path recorded none).
func (o *Observer) complete(d *audit.Decision, api string, resp any, err error) {
	if d.API == "" {
		d.API = api
	}
	if d.Result != "" {
		return
	}
	if err != nil {
		d.Result = "error"
		return
	}
	switch r := resp.(type) {
	case *authv3.CheckResponse:
		if r.GetStatus().GetCode() == int32(codes.OK) {
			d.Result = policy.Allowed.AuditResult()
		} else {
			d.Result = policy.ParamFlow.AuditResult() // refused, by some rule
		}
	case *rlsv3.RateLimitResponse:
		if r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			d.Result = policy.ParamFlow.AuditResult() // refused, by some rule
		} else if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			d.Result = policy.Allowed.AuditResult()
		}
	}
}

// fillRequestID sets d's request id when the decision path left it empty, cut to
// MaxRequestIDLen.
func (o *Observer) fillRequestID(ctx context.Context, d *audit.Decision, req any) {
	if d.RequestID == "" {
		d.RequestID = o.requestID(ctx, req)
	}
	if len(d.RequestID) > MaxRequestIDLen {
		d.RequestID = d.RequestID[:MaxRequestIDLen]
	}
}

// requestID is Envoy's x-request-id for the call: for Check, the HTTP request's x-request-id
// header; for either call, the gRPC metadata's x-request-id; for ShouldRateLimit, the value of
// the lease descriptor entry. "" when none. The HTTP request's id field is not it: Envoy puts
// its stream id there (CheckRequestUtils::setHttpRequest), which no access log prints as the
// request id.
func (o *Observer) requestID(ctx context.Context, req any) string {
	if r, ok := req.(*authv3.CheckRequest); ok {
		if id := checkHeader(r.GetAttributes().GetRequest().GetHttp(), HeaderRequestID); id != "" {
			return id
		}
	}
	if v := metadata.ValueFromIncomingContext(ctx, HeaderRequestID); len(v) > 0 && v[0] != "" {
		return v[0]
	}
	if r, ok := req.(*rlsv3.RateLimitRequest); ok {
		for _, desc := range r.GetDescriptors() {
			for _, e := range desc.GetEntries() {
				if e.GetKey() == o.leaseKey && e.GetValue() != "" {
					return e.GetValue()
				}
			}
		}
	}
	return ""
}

// checkHeader is the value of the request header name (lower case), from the headers map or,
// when Envoy sends raw headers (encode_raw_headers), the header map; the first one.
func checkHeader(h *authv3.AttributeContext_HttpRequest, name string) string {
	if v, ok := h.GetHeaders()[name]; ok {
		return v
	}
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		if strings.EqualFold(hv.GetKey(), name) {
			if raw := hv.GetRawValue(); len(raw) > 0 {
				return string(raw)
			}
			return hv.GetValue()
		}
	}
	return ""
}

// blocks reports whether d refused the request or would have (a dry run, a shadow rule): any
// result but the audit results of Allowed and Throttled, or a shadow rule's block.
func blocks(d *audit.Decision) bool {
	return d.Shadow || (d.Result != policy.Allowed.AuditResult() && d.Result != policy.Throttled.AuditResult())
}

// logs reports whether d goes to the decision log, within the lines a second allow (admit):
// every block, one allow in allowedEvery (an allow counts towards the sampling when it is
// asked about).
func (o *Observer) logs(d *audit.Decision) bool {
	if o.log == nil || d.Result == "" {
		return false
	}
	if blocks(d) {
		return true
	}
	return o.allowedEvery != 0 && (o.allowed.Add(1)-1)%o.allowedEvery == 0
}

// logDecision writes d to the decision log at time at, with the trace id of sc when it has
// one.
func (o *Observer) logDecision(d *audit.Decision, at time.Time, sc trace.SpanContext, err error) {
	ce := o.log.Check(zap.InfoLevel, "decision")
	if ce == nil {
		return
	}
	ce.Time = at
	value := o.value(d)
	fields := []zap.Field{
		zap.String("api", d.API),
		zap.String("request_id", d.RequestID),
		zap.String("result", d.Result),
		zap.String("reason", d.Reason),
		zap.String("resource", cut(d.Resource)),
		zap.String("rule", d.Rule),
		zap.String("origin", cut(d.Origin)),
		zap.String("param", cut(d.Param)),
		zap.String("value", cut(value)),
	}
	if d.Domain != "" {
		fields = append(fields, zap.String("domain", cut(d.Domain)))
	}
	if d.Shadow {
		fields = append(fields, zap.Bool("shadow", true))
	}
	if d.Wait > 0 {
		fields = append(fields, zap.Duration("wait", d.Wait))
	}
	if sc.HasTraceID() {
		fields = append(fields, zap.String("trace_id", sc.TraceID().String()))
	}
	if err != nil {
		fields = append(fields, zap.String("code", status.Code(err).String()))
	}
	ce.Write(fields...)
}

// value is d's value as it may be shown.
func (o *Observer) value(d *audit.Decision) string {
	if o.redact != nil && d.Value != "" {
		return o.redact(d.Param, d.Value)
	}
	return d.Value
}
