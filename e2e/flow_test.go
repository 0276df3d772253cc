package e2e

import (
	"bytes"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	envoyconfig "github.com/extauthz/extauthz/envoy-config"
)

// TestThrottle: POST:/orders spaces one user's orders 100ms apart and refuses at once an order
// that would wait more than 500ms. Eight orders at the same instant: six are answered at about
// 0, 100, ..., 500ms, two are refused without waiting.
func TestThrottle(t *testing.T) {
	s := sharedService(t)
	rr := limitRequest(t, req("POST", "/orders", "192.0.2.5", "x-origin", "web", "x-user-id", "throttle-1"), false)
	type answer struct {
		ok   bool
		took time.Duration
		err  error
	}
	const n = 8
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.limitErr(rr)
			answers[i] = answer{ok: err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, took: time.Since(start), err: err}
		}()
	}
	wg.Wait()
	var okTimes, refusedTimes []time.Duration
	for _, a := range answers {
		if a.err != nil {
			t.Fatalf("ShouldRateLimit: %v", a.err)
		}
		if a.ok {
			okTimes = append(okTimes, a.took)
		} else {
			refusedTimes = append(refusedTimes, a.took)
		}
	}
	sort.Slice(okTimes, func(i, j int) bool { return okTimes[i] < okTimes[j] })
	if len(okTimes) != 6 {
		t.Fatalf("%d of %d admitted (at %v), want 6: waits 0 to 500ms, 100ms apart", len(okTimes), n, okTimes)
	}
	const tol = 60 * time.Millisecond
	for i := 1; i < len(okTimes); i++ {
		if gap := okTimes[i] - okTimes[i-1]; gap < 100*time.Millisecond-tol || gap > 100*time.Millisecond+tol {
			t.Errorf("admitted answers at %v: gap %d is %v, want 100ms ± %v", okTimes, i, gap, tol)
		}
	}
	if last := okTimes[len(okTimes)-1]; last < 500*time.Millisecond-tol {
		t.Errorf("last admitted answer after %v, want about 500ms", last)
	}
	for _, d := range refusedTimes {
		if d > 100*time.Millisecond {
			t.Errorf("a refused order was answered after %v, want at once (the cut-off is known up front)", d)
		}
	}
}

func downloadReq(user string) envoyconfig.Request {
	return req("GET", "/downloads/f.bin", "192.0.2.6", "x-origin", "web", "x-user-id", user)
}

// TestConcurrency: GET:/downloads allows 2 in flight per user; the stream-done descriptor with
// negative hits gives a slot back; releases never take the count below zero.
func TestConcurrency(t *testing.T) {
	s := sharedService(t)
	acquire := limitRequest(t, downloadReq("conc-1"), false)
	release := limitRequest(t, downloadReq("conc-1"), true)
	if d := release.GetDescriptors()[0]; !d.GetIsNegativeHits() || d.GetHitsAddend().GetValue() != 1 {
		t.Fatalf("release descriptor = %v, want hits_addend 1 with is_negative_hits", d)
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	steps := []struct {
		name string
		rr   *rlsv3.RateLimitRequest
		want rlsv3.RateLimitResponse_Code
	}{
		{"first in flight", acquire, ok},
		{"second in flight", acquire, ok},
		{"third refused", acquire, over},
		{"a download ends", release, ok},
		{"a slot is free again", acquire, ok},
		{"full again", acquire, over},
		{"both end", release, ok},
		{"", release, ok},
		{"extra releases are harmless", release, ok},
		{"", release, ok},
		{"count never went below zero: one", acquire, ok},
		{"count never went below zero: two", acquire, ok},
		{"count never went below zero: three refused", acquire, over},
	}
	for i, st := range steps {
		if got := s.limit(t, st.rr).GetOverallCode(); got != st.want {
			t.Fatalf("step %d (%s): %v, want %v", i, st.name, got, st.want)
		}
	}
	// Another user is not affected.
	if !s.allowed(t, downloadReq("conc-2")) {
		t.Error("another user's download refused")
	}
}

// TestLeaseExpiry runs its own service with a 1s lease: a slot never released is freed.
func TestLeaseExpiry(t *testing.T) {
	rules, err := os.ReadFile(rulesYAML)
	if err != nil {
		t.Fatal(err)
	}
	short := bytes.Replace(rules, []byte("lease: 60s"), []byte("lease: 1s"), 1)
	if bytes.Equal(short, rules) {
		t.Fatal("rules.yaml has no `lease: 60s` to shorten")
	}
	s := newService(t, short)
	r := downloadReq("lease-1")
	for i, want := range []bool{true, true, false} {
		if got := s.allowed(t, r); got != want {
			t.Fatalf("acquire %d = %v, want %v", i, got, want)
		}
	}
	start := time.Now()
	if !eventually(3*time.Second, func() bool { return s.allowed(t, r) }) {
		t.Fatal("no slot freed within 3s of a 1s lease")
	}
	if waited := time.Since(start); waited < 700*time.Millisecond {
		t.Errorf("a slot freed after %v, before the 1s lease ran out", waited)
	}
}
