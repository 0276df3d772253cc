package e2e

import (
	"bytes"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/envoysim"
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

// downloadReq is a download by user; its x-request-id (Envoy sets one on every request) is
// "dl-" + user unless id is given.
func downloadReq(user string, id ...string) envoysim.Request {
	r := req("GET", "/downloads/f.bin", "192.0.2.6", "x-origin", "web", "x-user-id", user)
	r.Headers["x-request-id"] = []string{"dl-" + user}
	if len(id) > 0 {
		r.Headers["x-request-id"] = id[:1]
	}
	return r
}

// concurrencyStep is a download request's acquire (or, with release, its stream-done release)
// and the answer it must get.
type concurrencyStep struct {
	name    string
	id      string // the request's x-request-id
	release bool
	want    rlsv3.RateLimitResponse_Code
}

func runConcurrencySteps(t *testing.T, s *service, user string, steps []concurrencyStep) {
	t.Helper()
	for i, st := range steps {
		rr := limitRequest(t, downloadReq(user, st.id), st.release)
		if got := s.limit(t, rr).GetOverallCode(); got != st.want {
			t.Fatalf("step %d (%s): %v, want %v", i, st.name, got, st.want)
		}
	}
}

// TestConcurrency: GET:/downloads allows 2 in flight per user; the stream-done descriptor with
// negative hits gives a slot back; releases never take the count below zero.
func TestConcurrency(t *testing.T) {
	s := sharedService(t)
	release := limitRequest(t, downloadReq("conc-1"), true)
	if d := release.GetDescriptors()[0]; !d.GetIsNegativeHits() || d.GetHitsAddend().GetValue() != 1 {
		t.Fatalf("release descriptor = %v, want hits_addend 1 with is_negative_hits", d)
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	runConcurrencySteps(t, s, "conc-1", []concurrencyStep{
		{"first in flight", "r1", false, ok},
		{"second in flight", "r2", false, ok},
		{"third refused", "r3", false, over},
		{"the first download ends", "r1", true, ok},
		{"a slot is free again", "r4", false, ok},
		{"full again", "r5", false, over},
		{"both end", "r2", true, ok},
		{"", "r4", true, ok},
		{"extra releases are harmless", "r4", true, ok},
		{"", "r1", true, ok},
		{"count never went below zero: one", "r6", false, ok},
		{"count never went below zero: two", "r7", false, ok},
		{"count never went below zero: three refused", "r8", false, over},
	})
	// Another user is not affected.
	if !s.allowed(t, downloadReq("conc-2")) {
		t.Error("another user's download refused")
	}
}

// TestConcurrencyRefusedRelease: Envoy sends the stream-done release also for a download the
// rate-limit call refused; that release, carrying the refused request's own x-request-id, must
// not free a slot another download holds, however many refused requests there are.
func TestConcurrencyRefusedRelease(t *testing.T) {
	s := sharedService(t)
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	runConcurrencySteps(t, s, "refused-1", []concurrencyStep{
		{"a in flight", "a", false, ok},
		{"b in flight", "b", false, ok},
		{"c refused", "c", false, over},
		{"c's stream ends: its release frees nothing", "c", true, ok},
		{"d still refused", "d", false, over},
		{"d's stream ends", "d", true, ok},
		{"e still refused", "e", false, over},
		{"e's stream ends", "e", true, ok},
		{"a ends: its own slot comes back", "a", true, ok},
		{"f takes it", "f", false, ok},
		{"g refused", "g", false, over},
	})
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
