package policy

import (
	"sync"
	"time"
)

// HoldResolution is how finely held calls are woken: a throttled call is answered at the first
// multiple of HoldResolution (on the process's monotonic clock) at or after its turn, together
// with every other call whose turn falls in the same interval. The turns themselves stay exact
// (the limiter spaces them count per duration, without drift); an answer is never sent before
// its turn and, but for the scheduler, at most HoldResolution after it (an idle process's
// timers fire up to a millisecond late: Go's netpoller sleeps in whole milliseconds, so the
// median answer comes about 1 ms after its turn, see docs/performance.md). At 10,000 held calls a
// second this is one timer and one wake-up every millisecond instead of one per call, and gRPC
// writes the answers of a batch together.
const HoldResolution = time.Millisecond

// wakeups hands out, per interval of HoldResolution, one channel closed at the end of it (or
// before, by wakeAll: a Drain).
// Its zero value is ready to use; it is safe for concurrent use.
type wakeups struct {
	epoch time.Time // the origin of the intervals (monotonic); set on first use
	// since is the time since epoch; nil reads the monotonic clock. A test seam: the timers
	// run on the real clock whatever it says.
	since func(epoch time.Time) time.Duration

	mu      sync.Mutex
	batches map[int64]chan struct{} // by interval number: the calls woken at its end
}

// at returns a channel closed once the time is at least now+w (now read from the monotonic
// clock, not the Decider's), at the end of the HoldResolution interval that holds it, and the
// interval's number, for again.
func (k *wakeups) at(w time.Duration) (<-chan struct{}, int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.batches == nil {
		k.batches = map[int64]chan struct{}{}
		k.epoch = time.Now()
	}
	now := k.now()
	n := int64((now + w + HoldResolution - 1) / HoldResolution) // the first interval end at or after now+w
	return k.batch(n, now), n
}

// again returns the channel of interval n (from at) once more, after wakeAll closed the one
// at gave: a new one while its end is ahead, else one closed already.
func (k *wakeups) again(n int64) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	if time.Duration(n)*HoldResolution <= now {
		return closed
	}
	return k.batch(n, now)
}

// wakeAll closes the channel of every interval now (a Drain): each hold looks at the deadline in
// force and, unless it must end, waits for its interval again.
func (k *wakeups) wakeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for n, ch := range k.batches {
		close(ch)
		delete(k.batches, n)
	}
}

// closed is a channel closed from the start.
var closed = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// now returns the time since epoch (called with mu held).
func (k *wakeups) now() time.Duration {
	if k.since != nil {
		return k.since(k.epoch)
	}
	return time.Since(k.epoch)
}

// batch returns the channel of interval n, made with its timer if there is none (called with mu
// held, now the time since epoch).
func (k *wakeups) batch(n int64, now time.Duration) chan struct{} {
	if ch, ok := k.batches[n]; ok {
		return ch
	}
	ch := make(chan struct{})
	k.batches[n] = ch
	// One timer per interval: it runs once, closes the channel and forgets it (bounded by
	// the longest wait over HoldResolution), unless wakeAll did (the interval's channel is then
	// another, or none).
	time.AfterFunc(time.Duration(n)*HoldResolution-now, func() {
		k.mu.Lock()
		mine := k.batches[n] == ch
		if mine {
			delete(k.batches, n)
		}
		k.mu.Unlock()
		if mine {
			close(ch)
		}
	})
	return ch
}
