package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// transitions records what a Store reports through OnTransition.
type transitions struct {
	mu  sync.Mutex
	all []Transition
}

func (tr *transitions) add(t Transition) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.all = append(tr.all, t)
}

func (tr *transitions) get() []Transition {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]Transition(nil), tr.all...)
}

func (tr *transitions) kinds() []TransitionKind {
	var k []TransitionKind
	for _, t := range tr.get() {
		k = append(k, t.Kind)
	}
	return k
}

// Redis killed: the third failed call opens the breaker (Opened, once, with its error and the
// failures), the first decision left to the fallback after it is FallbackStarted (once,
// however many follow), and the probe that finds Redis back is Closed, with the outage's
// counts. A second outage is reported the same way.
func TestOutageTransitions(t *testing.T) {
	st, srv, tr := newFaultStoreWith(t)
	if err := evalErr(st); err != nil {
		t.Fatal(err)
	}
	for outage := range 2 {
		srv.Kill()
		fallbacks := 0
		for i := 0; ; i++ {
			if i > 100 {
				t.Fatal("the breaker did not open in 100 calls")
			}
			err := evalErr(st)
			if err == nil {
				t.Fatal("a call succeeded with Redis killed")
			}
			if errors.Is(err, ErrUnavailable) {
				break
			}
			st.NoteFallback()
			if st.Stats().BreakerOpen {
				fallbacks++ // the call that opened it
			}
		}
		const more = 7
		for range more - 1 { // the call above that met the open breaker was the first
			if err := evalErr(st); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("breaker open: %v, want ErrUnavailable", err)
			}
		}
		for range more {
			st.NoteFallback()
		}
		fallbacks += more
		want := []TransitionKind{Opened, FallbackStarted}
		if outage == 1 {
			want = append([]TransitionKind{Opened, FallbackStarted, Closed}, want...)
		}
		if got := tr.kinds(); !equalKinds(got, want) {
			t.Fatalf("outage %d: transitions %v, want %v", outage, got, want)
		}
		opened := tr.get()[len(want)-2]
		if opened.Failures != 3 || opened.Err == nil {
			t.Errorf("Opened: %d failures, error %v; want 3 and the error", opened.Failures, opened.Err)
		}
		srv.Restart()
		waitFor(t, "Closed reported", func() bool { return len(tr.get()) == len(want)+1 })
		closed := tr.get()[len(want)]
		if closed.Kind != Closed {
			t.Fatalf("after the restart: %v, want Closed", closed.Kind)
		}
		if closed.FailedCalls != 3 || closed.Fallbacks != uint64(fallbacks) || closed.ShortCircuits != more ||
			closed.Probes == 0 || closed.Outage <= 0 {
			t.Errorf("Closed = %+v; want 3 failed calls, %d fallbacks, %d short circuits, some probes, a duration", closed, fallbacks, more)
		}
		// The probe that closed the breaker came on a new connection; a call can still meet a
		// connection of the Redis that was killed and fail once (EOF) before the client drops
		// it. The next one must succeed.
		if err := evalErr(st); err != nil {
			if err := evalErr(st); err != nil {
				t.Fatalf("after Closed, twice: %v", err)
			}
		}
	}
}

// A Redis that cannot be reached at New: Opened at once, with no failed call.
func TestOutageAtStart(t *testing.T) {
	tr := &transitions{}
	st, err := NewWithOptions(Config{Addrs: []string{"127.0.0.1:1"}, Timeout: faultTimeout}, Options{OnTransition: tr.add})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := tr.get(); len(got) != 1 || got[0].Kind != Opened || got[0].Failures != 0 || got[0].Err == nil {
		t.Fatalf("transitions at New = %+v, want one Opened with no failure and the error", got)
	}
}

func equalKinds(a, b []TransitionKind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// newFaultStoreWith is newFaultStore with its transitions recorded and no cache of blocked
// values.
func newFaultStoreWith(t *testing.T) (*Store, *redistest.Server, *transitions) {
	t.Helper()
	tr := &transitions{}
	srv := redistest.Start(t)
	st, err := NewWithOptions(Config{Addrs: []string{srv.Addr()}, Timeout: faultTimeout, BreakerFailures: 3,
		BreakerCooldown: 20 * time.Millisecond, BlockedCache: -1}, Options{OnTransition: tr.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { st.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return st, srv, tr
}
