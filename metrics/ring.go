package metrics

import (
	"sync"
	"time"

	"github.com/extauthz/extauthz/policy"
)

// Window is how far back the per-second decision counts of Snapshot reach.
const Window = 5 * time.Minute

// windowSeconds is the number of one-second slots of a ring.
const windowSeconds = int64(Window / time.Second)

// kind is the class of a decision's outcome in a ring.
type kind uint8

const (
	kindOK        kind = iota // allowed
	kindShadow                // allowed, but a shadow rule would have blocked
	kindAuthority             // blocked by an authority rule
	kindParamFlow             // blocked by a hot-param rule
	kindInvalid               // a malformed request, refused
	kindOther                 // any other outcome (a call cancelled during its wait, ...)
	kinds
)

// kindOf classifies an outcome as passed to Decision.
func kindOf(o policy.Outcome) kind {
	switch o {
	case policy.Allowed, policy.Throttled:
		return kindOK
	case policy.Shadow, policy.ShadowThrottled, policy.DryRun:
		return kindShadow
	case policy.Authority:
		return kindAuthority
	case policy.ParamFlow, policy.QueueFull, policy.ShuttingDown:
		return kindParamFlow
	case policy.Invalid:
		return kindInvalid
	}
	return kindOther
}

// ring counts decisions per second over the last Window: windowSeconds slots, each the counts
// of one Unix second by kind. It takes 32 bytes a slot, 9.6 KB a ring. It is safe for
// concurrent use.
type ring struct {
	mu   sync.Mutex
	sec  [windowSeconds]int64 // the Unix second each slot counts; 0 for a slot never used
	n    [windowSeconds][kinds]uint32
	last int64 // the latest second counted
}

func (r *ring) add(sec int64, k kind) {
	i := slot(sec)
	r.mu.Lock()
	if r.sec[i] != sec {
		r.sec[i] = sec
		r.n[i] = [kinds]uint32{}
	}
	if r.n[i][k] < ^uint32(0) {
		r.n[i][k]++
	}
	r.last = max(r.last, sec)
	r.mu.Unlock()
}

// idle reports whether r counted nothing in the Window ending with second sec.
func (r *ring) idle(sec int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last <= sec-windowSeconds
}

// read fills t with the Window ending with second sec.
func (r *ring) read(sec int64, t *Traffic) {
	t.Allowed = make([]uint32, windowSeconds)
	t.Blocked = make([]uint32, windowSeconds)
	t.Totals = Totals{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for j := range windowSeconds {
		s := sec - windowSeconds + 1 + j // oldest first
		i := slot(s)
		if r.sec[i] != s {
			continue
		}
		n := &r.n[i]
		t.Allowed[j] = n[kindOK] + n[kindShadow]
		t.Blocked[j] = n[kindAuthority] + n[kindParamFlow] + n[kindInvalid]
		t.Totals.OK += uint64(n[kindOK])
		t.Totals.Shadow += uint64(n[kindShadow])
		t.Totals.Authority += uint64(n[kindAuthority])
		t.Totals.ParamFlow += uint64(n[kindParamFlow])
		t.Totals.Invalid += uint64(n[kindInvalid])
		t.Totals.Other += uint64(n[kindOther])
	}
}

func slot(sec int64) int64 {
	i := sec % windowSeconds
	if i < 0 {
		i += windowSeconds
	}
	return i
}
