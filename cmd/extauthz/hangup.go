package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
)

// notifyHangup starts delivering SIGHUP on the channel it returns, until stop is called.
func notifyHangup() (hup <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c, func() { signal.Stop(c) }
}

// reloadOnHangup reloads on every signal from hup until ctx ends (see hangup). Signals that
// come while a reload runs make one more reload.
func (s *service) reloadOnHangup(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.hangup(ctx)
		}
	}
}

// hangup reloads what an operator's SIGHUP asks for: the rules (the file, or etcd's keys) and
// the TLS certificate, read at once whether or not they look changed. A load that fails leaves
// what is in force, and is logged as a watcher's would be; the outcome is logged in one line.
func (s *service) hangup(ctx context.Context) {
	var err error
	if s.etcd != nil {
		err = s.etcd.Load(ctx)
	} else {
		err = s.store.Reload()
	}
	fields := []zap.Field{zap.Uint64("rules_version", s.store.Current().Version)}
	if err != nil {
		fields = append(fields, zap.Error(err))
	}
	if s.tls != nil {
		fields = append(fields, zap.Bool("tls_reloaded", s.tls.Reload()))
	}
	s.log.Info("SIGHUP: rules and TLS certificate reloaded", fields...)
}
