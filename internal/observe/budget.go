package observe

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
)

// DefaultMaxPerSecond is Options.MaxPerSecond when it is 0.
const DefaultMaxPerSecond = 100

// MaxFieldLen is the most bytes of a resource, origin, param or value a decision line carries:
// a longer one is cut (at a character boundary) and marked, so that a client sending 4 KiB
// origins and values does not make each line 8 KB.
const MaxFieldLen = 256

// MsgSuppressed is the message of the line that says how many decision lines a second over
// Options.MaxPerSecond left out.
const MsgSuppressed = "decision lines suppressed"

// budget caps the decision lines written per second of the clock, and reports those it
// suppressed once the second is over. It is safe for concurrent use.
type budget struct {
	max int

	mu         sync.Mutex
	sec        int64  // the Unix second counted
	written    int    // lines written in sec
	suppressed uint64 // lines suppressed in sec, not yet reported
	scheduled  bool   // a report of sec's suppressed lines is scheduled
}

// take reports whether a line may be written at now. When now starts a new second, it first
// returns the lines the earlier second suppressed (n > 0, in that second sec), for the caller
// to report; schedule is set when the caller should arrange report to run after the second,
// so that the count of a flood's last second is not lost when no line follows.
func (b *budget) take(now time.Time) (ok bool, n uint64, sec int64, schedule bool) {
	s := now.Unix()
	b.mu.Lock()
	defer b.mu.Unlock()
	if s != b.sec {
		n, sec = b.suppressed, b.sec
		b.sec, b.written, b.suppressed, b.scheduled = s, 0, 0, false
	}
	if b.written < b.max {
		b.written++
		return true, n, sec, false
	}
	b.suppressed++
	if !b.scheduled {
		b.scheduled, schedule = true, true
	}
	return false, n, sec, schedule
}

// due returns the lines suppressed in a second that is over at now (and forgets them), or 0.
func (b *budget) due(now time.Time) (n uint64, sec int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Unix() == b.sec || b.suppressed == 0 {
		return 0, 0
	}
	n, sec = b.suppressed, b.sec
	b.suppressed, b.scheduled = 0, false
	return n, sec
}

// admit reports whether a decision line may be written now, and the time it counted the line
// at, reporting first the lines an earlier second suppressed.
func (o *Observer) admit() (bool, time.Time) {
	now := o.now()
	ok, n, sec, schedule := o.budget.take(now)
	o.reportSuppressed(n, sec)
	if schedule {
		// One timer at most per second of a flood; it reports that second's count if no line
		// of a later second has by then.
		time.AfterFunc(time.Second-time.Duration(now.Nanosecond())+10*time.Millisecond, o.flushSuppressed)
	}
	return ok, now
}

// flushSuppressed reports the lines suppressed in a second that is over.
func (o *Observer) flushSuppressed() {
	n, sec := o.budget.due(o.now())
	o.reportSuppressed(n, sec)
}

// reportSuppressed logs and counts n lines suppressed in the Unix second sec; nothing for 0.
func (o *Observer) reportSuppressed(n uint64, sec int64) {
	if n == 0 {
		return
	}
	if o.onSuppressed != nil {
		o.onSuppressed(n)
	}
	o.log.Warn(MsgSuppressed, zap.Uint64("suppressed", n), zap.Time("second", time.Unix(sec, 0).UTC()),
		zap.Int("max_per_second", o.budget.max))
}

// cut returns s, or when it is longer than MaxFieldLen its first MaxFieldLen bytes or fewer (a
// whole number of characters), marked with the length it had.
func cut(s string) string {
	if len(s) <= MaxFieldLen {
		return s
	}
	end := MaxFieldLen
	for end > MaxFieldLen-utf8.UTFMax && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "…[truncated, " + strconv.Itoa(len(s)) + " bytes]"
}
