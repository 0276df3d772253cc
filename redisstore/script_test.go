package redisstore

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// Script's call, sent by another client, does what Eval does: the same keys change.
func TestScriptCall(t *testing.T) {
	s, _, _ := newTestStore(t)
	s.clock = nil
	ops := []hotparam.RemoteOp{{RuleID: "sc", Value: "v", Count: 3, Duration: time.Hour, Hits: 1}}
	src, keys, args := Script(DefaultPrefix, ops, 7)
	if src != scriptSource || len(keys) != 1 || keys[0] != key(DefaultPrefix, &ops[0]) {
		t.Fatalf("Script: keys %q", keys)
	}
	c := s.client.Load().c
	out, err := numbers(c.Do(t.Context(), c.B().Eval().Script(src).Numkeys(1).Key(keys...).Arg(args...).Build()))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 6 || out[0] != 1 || out[1] != 1 || out[2] != 2 {
		t.Fatalf("reply %v: want ok, allowed, 2 remaining", out)
	}
	if got := eval(t, s, ops...)[0]; !got.Allowed || got.Remaining != 1 {
		t.Errorf("Eval after the script call: got %+v, want allowed with 1 remaining", got)
	}
}
