package envoyapi

import (
	"context"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
)

// throttleRule spaces the requests of a value 100ms apart and holds one up to 500ms.
var throttleRule = hotparam.Rule{Resource: "t", Param: "k", Count: 10, Duration: time.Second,
	Behavior: hotparam.Throttle, MaxQueueingTime: 500 * time.Millisecond}

func TestCheckThrottle(t *testing.T) {
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{Resource: "t",
			Params: map[string]descriptors.Source{"k": {From: "header", Name: "x-k"}}}},
		paramFlow: []hotparam.Rule{throttleRule},
	})
	req := httpReq{headers: map[string]string{"x-k": "v"}}.build()

	// The first request of the value waits for nothing.
	resp, err := r.auth.Check(ctx(t), req)
	if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("first: %v, %v; want OK", resp, err)
	}
	if w := r.rec.queueWaits(); len(w) != 0 {
		t.Errorf("first: queue waits %v, want none", w)
	}

	// The second (at the same instant) must wait 100ms, but the call's deadline is nearer: it is
	// blocked at once and takes no slot.
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	resp, err = r.auth.Check(short, req)
	if err != nil {
		t.Fatalf("short deadline: %v, want a 429 answer", err)
	}
	if got := resp.GetDeniedResponse().GetStatus().GetCode(); got != typev3.StatusCode_TooManyRequests {
		t.Fatalf("short deadline: HTTP %v, want 429", got)
	}
	if b := decodeBody(t, resp.GetDeniedResponse().GetBody()); b.Reason != "throttle" || b.Value != "v" {
		t.Errorf("short deadline: body %+v, want a throttle block of v", b)
	}

	// With time enough, the next request waits exactly one spacing (100ms, not 200ms: the
	// blocked call took nothing), really held.
	began := time.Now()
	resp, err = r.auth.Check(ctx(t), req)
	if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("long deadline: %v, %v; want OK", resp, err)
	}
	if took := time.Since(began); took < 100*time.Millisecond {
		t.Errorf("answered after %v, want at least the 100ms wait", took)
	}
	if w := r.rec.queueWaits(); len(w) != 1 || w[0] != 100*time.Millisecond {
		t.Errorf("queue waits %v, want [100ms]", w)
	}

	// A call cancelled during its wait (200ms now) returns the context's error.
	cctx, ccancel := context.WithCancel(context.Background())
	go func() {
		for r.srv.Waiting() == 0 { // cancel once the call is held
			time.Sleep(time.Millisecond)
		}
		ccancel()
	}()
	_, err = r.auth.Check(cctx, req)
	if got := status.Code(err); got != codes.Canceled {
		t.Errorf("cancelled during the wait: %v, want Canceled", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.rec.last().result != policy.Cancelled && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.rec.last(); got.result != policy.Cancelled {
		t.Errorf("recorded %+v, want result %q", got, policy.Cancelled)
	}
}

func TestRateLimitThrottle(t *testing.T) {
	r := newRig(t, rigConfig{paramFlow: []hotparam.Rule{throttleRule}})
	req := rlReq("d", desc("resource", "t", "k", "v"))
	if resp, err := r.rls.ShouldRateLimit(ctx(t), req); err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("first: %v, %v; want OK", resp, err)
	}
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	resp, err := r.rls.ShouldRateLimit(short, req)
	if err != nil || resp.GetOverallCode() != over {
		t.Fatalf("short deadline: %v, %v; want OVER_LIMIT", resp, err)
	}
	if b := decodeBody(t, string(resp.GetRawBody())); b.Reason != "throttle" {
		t.Errorf("short deadline: body %+v, want a throttle block", b)
	}
	began := time.Now()
	resp, err = r.rls.ShouldRateLimit(ctx(t), req)
	if err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("long deadline: %v, %v; want OK", resp, err)
	}
	if took := time.Since(began); took < 100*time.Millisecond {
		t.Errorf("answered after %v, want at least the 100ms wait", took)
	}
	if w := r.rec.queueWaits(); len(w) != 1 || w[0] != 100*time.Millisecond {
		t.Errorf("queue waits %v, want [100ms]", w)
	}
}
