// Package proccpu is the CPU time this process has used, for benchmarks that report CPU per
// operation of work that runs on goroutines of their own (a watcher, held calls' wake-ups).
package proccpu

import (
	"syscall"
	"testing"
	"time"
)

// Used is the CPU time (user and system) this process has used so far (getrusage).
func Used(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
