package redisstore

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the spans of this package.
const tracerName = "github.com/extauthz/extauthz/redisstore"

// Attributes of the spans of Redis calls.
var (
	attrSystem  = attribute.String("db.system.name", "redis")
	attrEvalsha = attribute.String("db.operation.name", "EVALSHA")
	attrPing    = attribute.String("db.operation.name", "PING")
	keyOps      = attribute.Key("extauthz.redis.ops")
	keyGroups   = attribute.Key("extauthz.redis.groups")
	keyAllowed  = attribute.Key("extauthz.redis.allowed")
	keyUndo     = attribute.Key("extauthz.redis.undo")
)

// start starts a span of a Redis call, a child of the span in ctx, when the store traces; the
// returned span is a no-op otherwise.
func (s *Store) start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return s.tracer.Start(ctx, name, s.spanOptions(attrs)...)
}

// startAt is start for a span that began at t, of which the caller needs no context.
func (s *Store) startAt(ctx context.Context, name string, t time.Time, attrs ...attribute.KeyValue) trace.Span {
	if s.tracer == nil {
		return trace.SpanFromContext(context.Background())
	}
	_, span := s.tracer.Start(ctx, name, append(s.spanOptions(attrs), trace.WithTimestamp(t))...)
	return span
}

// spanOptions are the options of a client span of a Redis call with attrs.
func (s *Store) spanOptions(attrs []attribute.KeyValue) []trace.SpanStartOption {
	return []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, attrSystem, attribute.String("server.address", s.cfg.Addrs[0]))...)}
}

// end ends a span of a Redis call with its error.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
