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
			s.hangup()
		}
	}
}

// hangup reloads what an operator's SIGHUP asks for: the rules file and the TLS certificate,
// read at once whether or not they look changed. A load that fails leaves what is in force, and
// is logged as the watcher's would be; the outcome is logged in one line. Rules from etcd are
// left to their watcher, which also reads the keys every rules_etcd.check_interval (its state
// is not safe to share with a second reader).
func (s *service) hangup() {
	var fields []zap.Field
	for _, src := range s.sources {
		if r, ok := src.src.(reloader); ok {
			if err := r.Reload(); err != nil {
				fields = append(fields, zap.Error(err))
			}
		} else {
			fields = append(fields, zap.String("rules", src.watched))
		}
	}
	fields = append(fields, zap.Uint64("rules_version", s.store.Current().Version))
	if s.tls != nil {
		fields = append(fields, zap.Bool("tls_reloaded", s.tls.Reload()))
	}
	s.log.Info("SIGHUP: reloaded", fields...)
}
