package main

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// A cluster concurrency rule, two replicas on one Redis, acquires carrying lease ids: releases
// without a lease id, sent to either replica, free none of their slots, so a client cannot make
// room for itself that way; a release naming a lease frees that lease's slot, and a slot
// acquired without an id is freed by a bare release. Two acquisitions under one lease id are
// both that id's: a bare release frees neither, two releases of the id free both. (Before, a
// bare release freed the newest slot in Redis, whoever held it, and a second acquisition under
// an id was kept without it.)
func TestBinaryClusterBareReleaseFreesNoNamedSlot(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/upload", param: item_id, grade: concurrency, count: 2, lease: 1h, cluster: true}
`)
	ps := startReplicas(t, dir, srv.Addr(), rules, 2)
	clients := []rlsv3.RateLimitServiceClient{
		rlsv3.NewRateLimitServiceClient(dial(t, ps[0].GRPCAddr)),
		rlsv3.NewRateLimitServiceClient(dial(t, ps[1].GRPCAddr)),
	}
	call := func(replica int, item, lease string, release bool) rlsv3.RateLimitResponse_Code {
		t.Helper()
		return leased{"POST:/upload", "item_id", item, lease, release, false}.send(t, clients[replica]).GetOverallCode()
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	t.Run("distinct ids", func(t *testing.T) {
		if got := call(0, "big", "a", false); got != ok {
			t.Fatalf("acquire a: %v, want OK", got)
		}
		if got := call(1, "big", "b", false); got != ok {
			t.Fatalf("acquire b: %v, want OK", got)
		}
		for i := range 5 {
			call(i%2, "big", "", true) // releases without a lease id, on both replicas
		}
		if got := call(0, "big", "c", false); got != over {
			t.Fatalf("acquire c after bare releases: %v, want OVER_LIMIT (a and b still hold both slots)", got)
		}
		if got := call(1, "big", "c", false); got != over {
			t.Fatalf("acquire c on the other replica after bare releases: %v, want OVER_LIMIT", got)
		}
		call(1, "big", "a", true) // a's own release, on the other replica
		if got := call(0, "big", "", false); got != ok {
			t.Fatalf("acquire without an id after a's release: %v, want OK", got)
		}
		if got := call(0, "big", "d", false); got != over {
			t.Fatalf("acquire d: %v, want OVER_LIMIT (b and the bare slot held)", got)
		}
		call(1, "big", "", true) // frees the slot acquired without an id
		if got := call(0, "big", "d", false); got != ok {
			t.Errorf("acquire d after the bare slot's release: %v, want OK", got)
		}
	})

	t.Run("one id twice", func(t *testing.T) {
		for r := range 2 {
			if got := call(r, "twice", "s", false); got != ok {
				t.Fatalf("acquire s on replica %d: %v, want OK", r, got)
			}
		}
		for i := range 5 {
			call(i%2, "twice", "", true)
		}
		if got := call(0, "twice", "t", false); got != over {
			t.Fatalf("acquire t after bare releases: %v, want OVER_LIMIT (s holds both slots)", got)
		}
		call(1, "twice", "s", true)
		if got := call(0, "twice", "t", false); got != ok {
			t.Fatalf("acquire t after one release of s: %v, want OK", got)
		}
		call(0, "twice", "s", true) // s's second slot
		if got := call(1, "twice", "u", false); got != ok {
			t.Fatalf("acquire u after s's second release: %v, want OK", got)
		}
		if got := call(1, "twice", "v", false); got != over {
			t.Errorf("acquire v: %v, want OVER_LIMIT (t and u hold both slots)", got)
		}
	})
}
