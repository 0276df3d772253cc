package observe

import (
	"context"
	"io"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/extauthz/extauthz/internal/audit"
)

// BenchmarkUnary is the interceptor's cost on an allowed Check whose request carries a
// traceparent: none (the handler alone), decision log on with allows not logged and tracing
// off (the default), and tracing on with every call sampled (spans go to a batcher whose
// exporter discards them).
func BenchmarkUnary(b *testing.B) {
	req := checkRequest(map[string]string{
		"x-request-id": "a1b2c3", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		":path": "/items/42", ":method": "GET", "user-agent": "bench",
	}, "a1b2c3")
	ok := &authv3.CheckResponse{Status: &rpcstatus.Status{}}
	var o *Observer // the one reported to; nil for the handler alone
	handler := func(ctx context.Context, req any) (any, error) {
		if o != nil {
			d := audit.Decision{Result: "allowed", Resource: "GET:/items"}
			o.report(ctx, req, ok, &d, nil)
		}
		return ok, nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: authv3.Authorization_Check_FullMethodName}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("content-type", "application/grpc"))
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))

	b.Run("handler alone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = handler(ctx, req)
		}
	})
	b.Run("decision log", func(b *testing.B) {
		o = New(Options{Log: log})
		b.ReportAllocs()
		for b.Loop() {
			_, _ = o.Unary(ctx, req, info, handler)
		}
	})
	b.Run("decision log and tracing", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		o = New(Options{Log: log, Tracer: tp.Tracer("bench")})
		b.ReportAllocs()
		for b.Loop() {
			_, _ = o.Unary(ctx, req, info, handler)
		}
	})
}

// discard is a span exporter that drops every span.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkLoopbackCheck is a whole Check over loopback gRPC, without the interceptor and with
// it and its Report (decision log on, allows not logged, tracing off): the observer's share of
// a call.
func BenchmarkLoopbackCheck(b *testing.B) {
	req := checkRequest(map[string]string{
		"x-request-id": "a1b2c3", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}, "a1b2c3")
	for _, bc := range []struct {
		name string
		obs  *Observer
	}{
		{"without interceptor", nil},
		{"with interceptor", New(Options{Log: zap.NewNop()})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if bc.obs != nil {
				opts = append(opts, grpc.UnaryInterceptor(bc.obs.Unary))
			}
			c := serveWith(b, opts, &fakeAPI{obs: bc.obs})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.authz.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
