package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// answerer is a rate-limit service that answers by the request's first entry value: "ok",
// "over", or anything else an Unavailable error. It counts the calls it answered.
type answerer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
}

func (a *answerer) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	a.calls.Add(1)
	switch req.GetDescriptors()[0].GetEntries()[0].GetValue() {
	case "ok":
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
	case "over":
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
	}
	return nil, status.Error(codes.Unavailable, "no answer for this value")
}

// TestH2CountsEachAnswer drives a real grpc-go server with the h2 load generator for each kind
// of answer, and checks every answer lands in its own count, as many as the server gave.
func TestH2CountsEachAnswer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	a := &answerer{}
	rlsv3.RegisterRateLimitServiceServer(srv, a)
	go srv.Serve(lis)
	defer srv.Stop()

	for _, value := range []string{"ok", "over", "fail"} {
		t.Run(value, func(t *testing.T) {
			msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
				Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "item_id", Value: value}}}}})
			if err != nil {
				t.Fatal(err)
			}
			req := newH2Request(lis.Addr().String(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", msg)
			var tl tally
			var measuring atomic.Bool
			measuring.Store(true)
			stop := make(chan struct{})
			done := make(chan error, 1)
			before := a.calls.Load()
			go func() { done <- runH2(lis.Addr().String(), req, 0, 7, &measuring, stop, &tl) }()
			// more answers than the connection's first windows hold: window updates are honoured
			deadline := time.Now().Add(30 * time.Second)
			for tl.ok.Load()+tl.over.Load()+tl.failed.Load() < 20000 {
				if time.Now().After(deadline) {
					t.Fatalf("answers counted: ok %d, over %d, failed %d", tl.ok.Load(), tl.over.Load(), tl.failed.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
			measuring.Store(false)
			counted := tl.ok.Load() + tl.over.Load() + tl.failed.Load()
			close(stop)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// every count is of an answer the server gave
			if served := a.calls.Load() - before; counted > served {
				t.Errorf("counted %d answers, the server gave %d", counted, served)
			}
			want := map[string]*atomic.Int64{"ok": &tl.ok, "over": &tl.over, "fail": &tl.failed}[value]
			if want.Load() != counted {
				t.Errorf("%s: ok %d, over %d, failed %d: want all %d under %s", value, tl.ok.Load(), tl.over.Load(), tl.failed.Load(), counted, value)
			}
		})
	}
}

// TestH2SendsValuesInTurn gives the h2 load generator two messages, one asking for "ok" and one
// for "over": it sends them in turn, so the answers of each are as many, to the calls in flight.
func TestH2SendsValuesInTurn(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, &answerer{})
	go srv.Serve(lis)
	defer srv.Stop()

	var msgs [][]byte
	for _, value := range []string{"ok", "over"} {
		msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "item_id", Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, msg)
	}
	req := newH2Request(lis.Addr().String(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", msgs...)
	var tl tally
	var measuring atomic.Bool
	measuring.Store(true)
	stop := make(chan struct{})
	done := make(chan error, 1)
	const streams = 5
	go func() { done <- runH2(lis.Addr().String(), req, 1, streams, &measuring, stop, &tl) }()
	deadline := time.Now().Add(30 * time.Second)
	for tl.ok.Load()+tl.over.Load() < 2000 {
		if time.Now().After(deadline) {
			t.Fatalf("answers counted: ok %d, over %d, failed %d", tl.ok.Load(), tl.over.Load(), tl.failed.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// the counts are read after the loop stopped: the calls sent and not answered (at most the
	// streams in flight) are the only difference between the two values' counts
	ok, over := tl.ok.Load(), tl.over.Load()
	if tl.failed.Load() != 0 || ok == 0 || over == 0 || max(ok-over, over-ok) > streams {
		t.Errorf("ok %d, over %d, failed %d: want as many of each, to %d", ok, over, tl.failed.Load(), streams)
	}
}
