package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

func TestConcurrency(t *testing.T) {
	s, srv, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "c1", Value: "v", Grade: hotparam.Concurrency, Count: 2, Lease: 10 * time.Second}
	sec := time.Second
	runSteps(t, s, clk, op, []step{
		{0, 1, false, ok(1, 10*sec, 0, 0)},
		{0, 1, false, ok(0, 10*sec, 0, 0)},
		{0, 1, false, no(0, 10*sec, 10*sec)}, // the oldest lease ends in 10s
		{0, 1, true, ok(1, 10*sec, 0, 0)},
		{sec, 1, false, ok(0, 10*sec, 0, 0)},
		{2 * sec, 2, false, no(0, 9*sec, 9*sec)}, // needs both leases gone: the newer ends at 11s
		{2 * sec, 3, false, no(0, 9*sec, 0)},     // more than the limit: never
		// at 10s the lease taken at 0 has expired: one slot free without a release
		{10 * sec, 1, false, ok(0, 10*sec, 0, 0)},
		{10 * sec, 5, true, ok(2, 0, 0, 0)}, // never below zero
	})
	k := key(DefaultPrefix, &op)
	if got := srv.CLI("EXISTS", k); got != "0" {
		t.Errorf("a value with nothing in flight is forgotten: EXISTS got %s, want 0", got)
	}
	clk.setReal()
	eval(t, s, op)
	if pttl, _ := strconv.Atoi(srv.CLI("PTTL", k)); pttl <= 9000 || pttl > 10001 {
		t.Errorf("PTTL: got %d, want the lease, 10000ms, or a little less", pttl)
	}
}
