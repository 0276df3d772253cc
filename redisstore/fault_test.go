package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// These tests use the real clock: a fault is observed through deadlines, with tolerances for a
// loaded machine and the race detector.

const faultTimeout = 100 * time.Millisecond

func newFaultStore(t *testing.T) (*Store, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	s, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: faultTimeout, BreakerFailures: 3,
		BreakerCooldown: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, srv
}

var loadOp = hotparam.RemoteOp{RuleID: "load", Value: "v", Count: 1e9, Duration: time.Second, Hits: 1}

// load calls Eval from 4 goroutines until stop is closed, and records the longest failed call.
func load(s *Store, stop <-chan struct{}) (wait func() time.Duration) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var longest time.Duration
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]hotparam.RemoteResult, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if err := s.Eval(context.Background(), []hotparam.RemoteOp{loadOp}, res); err != nil {
					d := time.Since(start)
					mu.Lock()
					longest = max(longest, d)
					mu.Unlock()
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	return func() time.Duration { wg.Wait(); return longest }
}

// waitFor polls cond every 5ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func evalErr(s *Store) error {
	return s.Eval(context.Background(), []hotparam.RemoteOp{loadOp}, make([]hotparam.RemoteResult, 1))
}

// checkOpen checks that an open breaker answers ErrUnavailable without waiting.
func checkOpen(t *testing.T, s *Store) {
	t.Helper()
	for range 100 {
		start := time.Now()
		err := evalErr(s)
		if d := time.Since(start); d > faultTimeout/4 {
			t.Fatalf("a call with the breaker open took %v, want well under the %v timeout", d, faultTimeout)
		}
		if !errors.Is(err, ErrUnavailable) {
			if err == nil {
				return // a probe already closed the breaker: nothing more to check
			}
			t.Fatalf("with the breaker open: got %v, want ErrUnavailable", err)
		}
	}
}

func TestRedisKilledAndRestarted(t *testing.T) {
	s, srv := newFaultStore(t)
	stop := make(chan struct{})
	wait := load(s, stop)
	time.Sleep(50 * time.Millisecond)
	srv.Kill()
	waitFor(t, "breaker opens after Redis was killed", func() bool { return s.Stats().BreakerOpen })
	close(stop)
	if longest := wait(); longest > faultTimeout+200*time.Millisecond {
		t.Errorf("longest failed call: %v, want within the %v timeout (+200ms tolerance)", longest, faultTimeout)
	}
	checkOpen(t, s)
	srv.Restart()
	// Each of the client's connections finds out on its own use that the old server is gone (a
	// call over one fails once, as any pooled client's would): wait until calls succeed in a row.
	waitFor(t, "calls succeed after Redis restarted", func() bool {
		for range 8 {
			if evalErr(s) != nil {
				return false
			}
		}
		return true
	})
	st := s.Stats()
	if st.BreakerOpen || st.BreakerOpens == 0 || st.Probes == 0 || st.ShortCircuits == 0 || st.Errors == 0 {
		t.Errorf("stats after recovery: got %+v, want breaker closed, opened at least once, probes, short circuits and errors", st)
	}
	// the restarted server had no script: EVAL loaded it, and the answers are right again
	if got := eval(t, s, qps("after", "x", 1))[0]; !got.Allowed {
		t.Errorf("first call after restart: got %+v, want allowed", got)
	}
	if got := eval(t, s, qps("after", "x", 1))[0]; got.Allowed {
		t.Errorf("second call after restart: got %+v, want blocked", got)
	}
}

func TestRedisHangs(t *testing.T) {
	s, srv := newFaultStore(t)
	// a loaded machine may miss the deadline: warm up (script loaded) until a call succeeds
	waitFor(t, "a call succeeds before the fault", func() bool { return evalErr(s) == nil })
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	for i := range 3 {
		start := time.Now()
		err := evalErr(s)
		d := time.Since(start)
		if err == nil {
			t.Fatalf("call %d to a stopped Redis: got nil error", i)
		}
		if d < faultTimeout-5*time.Millisecond || d > faultTimeout+200*time.Millisecond {
			t.Errorf("call %d to a stopped Redis took %v, want the %v timeout", i, d, faultTimeout)
		}
	}
	if !s.Stats().BreakerOpen {
		t.Fatalf("breaker after 3 timeouts: got closed, want open")
	}
	checkOpen(t, s)
	srv.Resume()
	resumed = true
	waitFor(t, "calls succeed after Redis resumed", func() bool { return evalErr(s) == nil })
	if st := s.Stats(); st.BreakerOpen {
		t.Errorf("breaker after recovery: got open, want closed")
	}
}

func TestNewWithRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	s, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: faultTimeout, BreakerCooldown: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("New with Redis down: got %v, want a Store that connects later", err)
	}
	defer s.Close()
	if err := evalErr(s); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Eval before any connection: got %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	srv.Restart()
	waitFor(t, "calls succeed once Redis is up", func() bool { return evalErr(s) == nil })
}

func TestObserveAndClose(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	var seen []error
	s, err := NewWithOptions(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second},
		Options{Observe: func(d time.Duration, err error) {
			mu.Lock()
			seen = append(seen, err)
			mu.Unlock()
			if d <= 0 {
				t.Errorf("observed latency %v, want > 0", d)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := evalErr(s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := evalErr(s); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Eval after Close: got %v, want ErrUnavailable", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != nil {
		t.Errorf("observed: got %v, want one successful call", seen)
	}
	if st := s.Stats(); st.Calls != 1 || st.RoundTrips != 2 || st.Latency <= 0 {
		t.Errorf("stats: got %+v, want 1 call, 2 round trips (EVALSHA, then EVAL on a fresh server)", st)
	}
}

func TestCallerCancelIsNoFailure(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BreakerFailures: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Eval(ctx, []hotparam.RemoteOp{loadOp}, make([]hotparam.RemoteResult, 1)); err == nil {
		t.Fatal("Eval with a cancelled context: got nil error")
	}
	if st := s.Stats(); st.BreakerOpen || st.Errors != 1 {
		t.Errorf("after the caller cancelled: got %+v, want one error and the breaker closed", st)
	}
	if err := evalErr(s); err != nil {
		t.Errorf("next call: got %v, want nil", err)
	}
}

func TestRedisErrorReplyIsNoOutage(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BreakerFailures: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	op := qps("wrongtype", "v", 5)
	srv.CLI("ZADD", key(DefaultPrefix, &op), "1", "m") // a sorted set where a bucket belongs
	if err := s.Eval(context.Background(), []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1)); err == nil {
		t.Fatal("Eval on a key of the wrong type: got nil error")
	}
	if st := s.Stats(); st.BreakerOpen || st.Errors != 1 {
		t.Errorf("after an error reply: got %+v, want one error and the breaker closed", st)
	}
}
