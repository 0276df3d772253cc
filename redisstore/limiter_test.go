package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
	"github.com/extauthz/extauthz/redisstore"
)

// Two replicas, each with its own Limiter and Store, share one limit through Redis.
func TestLimitersShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	rules := []hotparam.Rule{
		{Resource: "POST:/order", Param: "item_id", Count: 4, Duration: time.Hour, Cluster: true},
		{Resource: "POST:/order", Param: "user", Grade: hotparam.Concurrency, Count: 1, Cluster: true},
	}
	var limiters []*hotparam.Limiter
	for range 2 {
		s, err := redisstore.New(redisstore.Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		l, err := hotparam.New(rules, hotparam.Options{Remote: s, Fallback: hotparam.FallbackDeny})
		if err != nil {
			t.Fatal(err)
		}
		limiters = append(limiters, l)
	}
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) // the local clock; Redis keeps its own
	entry := func(item string, release bool) []hotparam.Entry {
		return []hotparam.Entry{{Resource: "POST:/order", Release: release, Params: []hotparam.Param{
			{Name: "item_id", Values: []string{item}}, {Name: "user", Values: []string{"u-" + item}}}}}
	}
	ctx := context.Background()
	for i, want := range []bool{true, true, true, true, false} {
		l := limiters[i%2]
		got := l.Check(ctx, now, entry("42", false), hotparam.CheckOptions{}, nil)
		if got.Allowed != want {
			t.Fatalf("call %d on replica %d: got %+v, want allowed %v", i, i%2, got, want)
		}
		if got.Allowed {
			limiters[(i+1)%2].Check(ctx, now, entry("42", true), hotparam.CheckOptions{}, nil) // done elsewhere
		}
	}
	// the concurrency limit of one is held across replicas
	if got := limiters[0].Check(ctx, now, entry("7", false), hotparam.CheckOptions{}, nil); !got.Allowed {
		t.Fatalf("first request for item 7: got %+v, want allowed", got)
	}
	got := limiters[1].Check(ctx, now, entry("7", false), hotparam.CheckOptions{}, nil)
	if got.Allowed || got.Block.Reason != hotparam.ReasonConcurrency {
		t.Errorf("second request in flight on the other replica: got %+v, want blocked by concurrency", got)
	}
}
