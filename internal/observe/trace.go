package observe

import (
	"context"
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/internal/audit"
)

// extract returns ctx carrying the trace context Envoy sent with the call. Envoy's ext_authz
// and rate-limit clients send through its gRPC async client with the request's active span
// (ext_authz GrpcClientImpl::check, ratelimit GrpcClientImpl::limit), and
// Grpc::AsyncRequestImpl::onCreateInitialMetadata injects the context of the call's own egress
// span into the gRPC metadata: the nearest parent, read first. A Check whose metadata carries
// none (Envoy not tracing, another client) falls back to the HTTP request's own headers, the
// context the downstream client sent.
func (o *Observer) extract(ctx context.Context, req any) context.Context {
	if c := o.prop.Extract(ctx, mdCarrier{ctx}); trace.SpanContextFromContext(c).IsValid() {
		return c
	}
	if r, ok := req.(*authv3.CheckRequest); ok {
		if h := r.GetAttributes().GetRequest().GetHttp(); h != nil {
			return o.prop.Extract(ctx, headerCarrier{h})
		}
	}
	return ctx
}

// describeSpan puts d on span.
func (o *Observer) describeSpan(span trace.Span, d *audit.Decision) {
	attrs := []attribute.KeyValue{
		attribute.String("rpc.system", "grpc"),
		attribute.String("extauthz.api", d.API),
		attribute.String("extauthz.result", d.Result),
	}
	for _, kv := range [...]struct{ k, v string }{
		{"extauthz.request_id", d.RequestID}, {"extauthz.reason", d.Reason},
		{"extauthz.resource", cut(d.Resource)}, {"extauthz.rule", d.Rule}, {"extauthz.origin", cut(d.Origin)},
		{"extauthz.param", cut(d.Param)}, {"extauthz.value", cut(o.value(d))},
	} {
		if kv.v != "" {
			attrs = append(attrs, attribute.String(kv.k, kv.v))
		}
	}
	if d.Shadow {
		attrs = append(attrs, attribute.Bool("extauthz.shadow", true))
	}
	if d.Wait > 0 {
		attrs = append(attrs, attribute.Int64("extauthz.wait_us", d.Wait.Microseconds()))
	}
	span.SetAttributes(attrs...)
}

// endSpan ends span, the span of a call that returned err. A block is no error; a call that
// failed is.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		st := status.Convert(err)
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
		span.SetStatus(otelcodes.Error, st.Message())
	}
	span.End()
}

// mdCarrier reads the incoming gRPC metadata of a call as a propagation carrier, one key at a
// time (without copying the whole metadata, as metadata.FromIncomingContext would); it never
// writes.
type mdCarrier struct{ ctx context.Context }

func (c mdCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, strings.ToLower(key)); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(string, string) {}

func (c mdCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}

// headerCarrier reads a CheckRequest's HTTP headers as a propagation carrier; it never writes.
type headerCarrier struct {
	h *authv3.AttributeContext_HttpRequest
}

func (c headerCarrier) Get(key string) string { return checkHeader(c.h, strings.ToLower(key)) }

func (c headerCarrier) Set(string, string) {}

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c.h.GetHeaders()))
	for k := range c.h.GetHeaders() {
		keys = append(keys, k)
	}
	for _, hv := range c.h.GetHeaderMap().GetHeaders() {
		keys = append(keys, strings.ToLower(hv.GetKey()))
	}
	return keys
}
