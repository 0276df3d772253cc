// Package wait is the test kits' one poll-until-true loop: a process coming up, a cluster
// settling, a certificate being served.
package wait

import (
	"errors"
	"fmt"
	"time"
)

// stop marks an error that ends Until at once: the process being waited on has exited, say.
type stop struct{ err error }

func (s stop) Error() string { return s.err.Error() }
func (s stop) Unwrap() error { return s.err }

// Stop wraps err so that Until returns it without waiting any longer.
func Stop(err error) error { return stop{err} }

// Until calls cond every interval until it returns nil, returns an error made by Stop, or
// limit has passed. The error after limit names the limit and carries cond's last error.
func Until(limit, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var s stop
		if errors.As(err, &s) {
			return s.err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not within %v: %w", limit, err)
		}
		time.Sleep(interval)
	}
}
