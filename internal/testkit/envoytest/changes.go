package envoytest

import (
	"sync"
	"time"
)

// changes wakes the callers waiting for a state guarded by a mutex to change. The zero value
// is ready; every method requires that mutex held, but waitFor, which takes it.
type changes struct {
	waiters []chan struct{}
}

// notify wakes every waiter.
func (c *changes) notify() {
	for _, ch := range c.waiters {
		close(ch)
	}
	c.waiters = nil
}

// waitFor waits up to limit for cond, checked with mu held now and on every notify, and
// reports whether it became true.
func (c *changes) waitFor(mu *sync.Mutex, limit time.Duration, cond func() bool) bool {
	deadline := time.After(limit)
	for {
		mu.Lock()
		ok := cond()
		ch := make(chan struct{})
		if !ok {
			c.waiters = append(c.waiters, ch)
		}
		mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}
