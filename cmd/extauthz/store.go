package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/redisstore"
)

// checkTimeout bounds the check of Redis's eviction policy at start.
const checkTimeout = 2 * time.Second

// newRemote returns the shared store of cluster rules configured by cfg, or nil when none is
// (every rule then keeps its state in memory). Calls to it are timed into m, and are spans of
// tp's when tp is not nil (tracing on). Its outages (the breaker opening, the fallback
// starting, Redis back) and what its samples of INFO find (evictions, restarts) are logged to
// log, each once; the evictions and restarts are counted in m's registry. At start it checks
// each master's maxmemory-policy: an evicting one is a warning, or an error with
// require_noeviction.
//
// This is the one place the Redis store is wired in: the Limiter gets it through
// limiterOptions, the service runs its Run loop (breaker probes, samples) and closes it on exit.
func newRemote(cfg config.RedisConfig, m *metrics.Metrics, tp trace.TracerProvider, log *zap.Logger) (*redisstore.Store, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	log = log.Named("redis")
	rem, err := redisstore.NewWithOptions(cfg.Config, redisstore.Options{Observe: m.RedisCall, TracerProvider: tp,
		OnTransition: logTransition(log, cfg), OnServer: logServer(log, cfg)})
	if err != nil {
		return nil, err
	}
	if err := checkEviction(rem, cfg, log); err != nil {
		rem.Close()
		return nil, err
	}
	reg := m.Registry()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "extauthz_redis_evicted_keys_total",
		Help: "Keys the Redis masters evicted (maxmemory) since this process started, from the growth of INFO evicted_keys between samples: every key of the server, not only extauthz's.",
	}, func() float64 { return float64(rem.Stats().EvictedKeys) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "extauthz_redis_restarts_total",
		Help: "Samples that found a Redis master's run_id changed (it restarted: its keys are lost unless it persisted them).",
	}, func() float64 { return float64(rem.Stats().Restarts) }))
	return rem, nil
}

// checkEviction reads every master's eviction policy and persistence and logs them; an
// evicting policy is a warning, or the error returned with require_noeviction. A Redis that
// cannot be asked now is a warning: Run's first sample checks it when it answers.
func checkEviction(rem *redisstore.Store, cfg config.RedisConfig, log *zap.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	infos, err := rem.Check(ctx)
	if err != nil {
		log.Warn("cannot check redis's eviction policy now; checked when it answers", zap.Error(err))
	}
	for _, in := range infos {
		if !in.Master {
			continue
		}
		log.Info("redis store", zap.String("addr", in.Addr), zap.String("maxmemory_policy", in.Policy),
			zap.String("policy_from", in.PolicyFrom), zap.Int64("maxmemory", in.MaxMemory),
			zap.Bool("aof", in.AOF), zap.Bool("rdb_saves", in.RDBSaves), zap.Int("replicas", in.Replicas))
		if !redisstore.Evicts(in.Policy) {
			continue
		}
		if cfg.RequireNoeviction {
			return fmt.Errorf("store.redis.require_noeviction: Redis %s has maxmemory-policy %s, which evicts keys (a depleted value's key deleted gets its full count again): set maxmemory-policy noeviction, or unset require_noeviction",
				in.Addr, in.Policy)
		}
		logEvicting(log, in)
	}
	return nil
}

// logEvicting warns of a master whose policy evicts keys.
func logEvicting(log *zap.Logger, in redisstore.ServerInfo) {
	log.Warn("redis maxmemory-policy evicts keys: a cluster rule's value whose key is evicted gets its full count again; set noeviction (or store.redis.require_noeviction to refuse this)",
		zap.String("addr", in.Addr), zap.String("maxmemory_policy", in.Policy), zap.Int64("maxmemory", in.MaxMemory))
}

// logTransition logs each change of the store's availability, once.
func logTransition(log *zap.Logger, cfg config.RedisConfig) func(redisstore.Transition) {
	return func(t redisstore.Transition) {
		switch t.Kind {
		case redisstore.Opened:
			log.Warn("redis unavailable: breaker open", zap.Int("failed_calls", t.Failures),
				zap.Bool("at_start", t.Failures == 0), zap.Error(t.Err), zap.String("fallback", cfg.Fallback),
				zap.Duration("probe_every", cfg.BreakerCooldown))
		case redisstore.FallbackStarted:
			fields := []zap.Field{zap.String("fallback", cfg.Fallback), zap.Duration("after", t.Outage)}
			if cfg.Fallback == "local" {
				fields = append(fields, zap.Int("replicas", max(cfg.Replicas, 1)))
			}
			log.Warn("redis fallback started: cluster rules decided without redis", fields...)
		case redisstore.Closed:
			log.Info("redis available again: breaker closed", zap.Duration("outage", t.Outage),
				zap.Uint64("failed_calls", t.FailedCalls), zap.Uint64("fallback_decisions", t.Fallbacks),
				zap.Uint64("short_circuited", t.ShortCircuits), zap.Uint64("probes", t.Probes))
		}
	}
}

// logServer logs what the samples of INFO find, once per change.
func logServer(log *zap.Logger, cfg config.RedisConfig) func(redisstore.ServerEvent) {
	return func(e redisstore.ServerEvent) {
		addr := zap.String("addr", e.Info.Addr)
		switch e.Kind {
		case redisstore.Evicting:
			log.Warn("redis is evicting keys: values of cluster rules may get their full count again", addr,
				zap.Uint64("evicted", e.Evicted), zap.String("maxmemory_policy", e.Info.Policy), zap.Int64("maxmemory", e.Info.MaxMemory))
		case redisstore.EvictingStopped:
			log.Info("redis stopped evicting keys", addr, zap.Uint64("evicted", e.Evicted), zap.Duration("lasted", e.Since))
		case redisstore.Restarted:
			log.Warn("redis restarted: the state of cluster rules it held is lost unless it persisted it", addr,
				zap.Duration("uptime", e.Info.Uptime), zap.Bool("aof", e.Info.AOF), zap.Bool("rdb_saves", e.Info.RDBSaves),
				zap.Int("replicas", e.Info.Replicas))
		case redisstore.PolicyEvicts:
			if cfg.RequireNoeviction {
				log.Error("redis maxmemory-policy evicts keys, though store.redis.require_noeviction is set (it was not reachable at start, or the policy changed)",
					addr, zap.String("maxmemory_policy", e.Info.Policy), zap.Int64("maxmemory", e.Info.MaxMemory))
				return
			}
			logEvicting(log, e.Info)
		}
	}
}

// runRemote runs the store's background loop until ctx ends; a nil store has none.
func runRemote(ctx context.Context, rem *redisstore.Store) error {
	if rem == nil {
		return nil
	}
	return rem.Run(ctx)
}

// limiterOptions are the hot-param options: the shared store, its fallback policy, the
// fallbacks counted into m under the policy's name (and told to the store, for its outage
// log), and the window of /hot's counts.
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
		opts.OnFallback = func(error) {
			m.RedisFallback(policy)
			rem.NoteFallback()
		}
	}
	return opts
}
