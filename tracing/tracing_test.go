package tracing

import (
	"context"
	"testing"
)

func TestOff(t *testing.T) {
	p, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled() || p.TracerProvider() != nil {
		t.Errorf("without an endpoint: enabled %v, provider %v; want off and nil", p.Enabled(), p.TracerProvider())
	}
	_, span := p.Tracer().Start(context.Background(), "x")
	if span.IsRecording() {
		t.Error("a span records with tracing off")
	}
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestOn(t *testing.T) {
	if _, err := New(context.Background(), Options{Endpoint: "127.0.0.1:4317", SampleRatio: 2}); err == nil {
		t.Error("a sample ratio of 2 accepted")
	}
	p, err := New(context.Background(), Options{Endpoint: "127.0.0.1:4317", Insecure: true, SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Enabled() || p.TracerProvider() == nil {
		t.Error("with an endpoint: tracing off")
	}
	_, span := p.Tracer().Start(context.Background(), "x")
	if !span.IsRecording() {
		t.Error("a root span does not record at sample ratio 1")
	}
	span.End()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing listens there: shutdown gives up at once rather than wait for it
	_ = p.Shutdown(ctx)
}
