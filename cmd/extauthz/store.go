package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/config"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/redisstore"
)

// newRemote returns the shared store of cluster rules configured by cfg, or nil when none is
// (every rule then keeps its state in memory). Calls to it are timed into m, and are spans of
// tp's when tp is not nil (tracing on).
//
// This is the one place the Redis store is wired in: the Limiter gets it through
// limiterOptions, the service runs its Run loop (breaker probes) and closes it on exit.
func newRemote(cfg config.RedisConfig, m *metrics.Metrics, tp trace.TracerProvider) (*redisstore.Store, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	return redisstore.NewWithOptions(cfg.Config, redisstore.Options{Observe: m.RedisCall, TracerProvider: tp})
}

// runRemote runs the store's background loop until ctx ends; a nil store has none.
func runRemote(ctx context.Context, rem *redisstore.Store) error {
	if rem == nil {
		return nil
	}
	return rem.Run(ctx)
}

// limiterOptions are the hot-param options: the shared store, its fallback policy, the
// fallbacks counted into m under the policy's name, and the window of /hot's counts.
func limiterOptions(cfg config.RedisConfig, hotWindow time.Duration, rem *redisstore.Store, m *metrics.Metrics) hotparam.Options {
	opts := hotparam.Options{Replicas: cfg.Replicas, TopWindow: hotWindow}
	// The config was validated: a spelling hotparam does not read cannot reach here; the
	// default (local) stands in for it all the same.
	if err := opts.Fallback.UnmarshalText([]byte(cfg.Fallback)); err != nil {
		opts.Fallback = hotparam.FallbackLocal
	}
	policy := opts.Fallback.String()
	if rem != nil {
		opts.Remote = rem
		opts.OnFallback = func(error) { m.RedisFallback(policy) }
	}
	return opts
}
