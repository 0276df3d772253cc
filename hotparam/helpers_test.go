package hotparam

import (
	"context"
	"testing"
	"time"
)

// t0 is the instant the tests start at.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func mustNew(t testing.TB, rules ...Rule) *Limiter {
	t.Helper()
	l, err := New(rules, Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// one is an entry of resource "r" with one value of param "p".
func one(v string, hits int64) Entry {
	return Entry{Resource: "r", Params: []Param{{Name: "p", Values: []string{v}}}, Hits: hits}
}

// check runs one Check of entries at now and returns the decision and the statuses.
func check(l *Limiter, now time.Time, entries ...Entry) (Decision, []Status) {
	st := make([]Status, len(entries))
	d := l.Check(context.Background(), now, entries, CheckOptions{}, st)
	return d, st
}

func qps(count int64, d time.Duration) Rule {
	return Rule{Resource: "r", Param: "p", Grade: QPS, Count: count, Duration: d}
}
