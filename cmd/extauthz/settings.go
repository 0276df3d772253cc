package main

import (
	"math"
	"runtime"

	"go.uber.org/zap"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/internal/memlimit"
)

// logSettings logs the settings the service starts with (never the Redis password).
func logSettings(log *zap.Logger, cfg config.Config) {
	store := "memory"
	if cfg.Store.Redis.Enabled() {
		store = "redis"
	}
	log.Info("starting extauthz",
		zap.String("grpc_addr", cfg.GRPCAddr),
		zap.String("admin_addr", cfg.AdminAddr),
		zap.Bool("pprof", cfg.Admin.PProf),
		zap.String("rules_file", cfg.RulesFile),
		zap.Bool("rules_optional", cfg.RulesOptional),
		zap.Strings("rules_etcd_keys", cfg.RulesEtcd.Keys),
		zap.String("log_level", cfg.Log.Level),
		zap.Bool("tls", cfg.TLS.Enabled()),
		zap.Bool("mtls", cfg.TLS.ClientCAFile != ""),
		zap.Int("max_recv_msg_size", cfg.GRPC.MaxRecvMsgSize),
		zap.Int("max_concurrent_streams", cfg.GRPC.MaxConcurrentStreams),
		zap.Int("stream_workers", cfg.GRPC.StreamWorkers),
		// the processors Go runs on: the container's CPU limit, else the machine's cores,
		// unless GOMAXPROCS is set (docs/deploy.md: what it costs a held call)
		zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)),
		zap.Duration("keepalive_time", cfg.GRPC.Keepalive.Time),
		zap.Duration("keepalive_timeout", cfg.GRPC.Keepalive.Timeout),
		zap.Duration("keepalive_min_time", cfg.GRPC.Keepalive.MinTime),
		zap.Duration("shutdown_grace", cfg.ShutdownGrace),
		zap.String("store", store),
		zap.Strings("redis_addrs", cfg.Store.Redis.Addrs),
		zap.String("redis_mode", cfg.Store.Redis.Mode),
		zap.String("redis_fallback", cfg.Store.Redis.Fallback),
		zap.Int("redis_replicas", cfg.Store.Redis.Replicas),
		zap.Strings("param_names", cfg.ParamNames),
		zap.Strings("sensitive_params", cfg.Sensitive.Params),
		zap.Bool("sensitive_key_set", cfg.Sensitive.Key != ""),
		zap.String("tracing_endpoint", cfg.Tracing.Endpoint),
	)
}

// setMemoryLimit sets the Go runtime's soft memory limit from setting (the memory_limit key) or
// the container's cgroup, and logs it with the collector's target that goes with it
// (memlimit.Limit.GCTarget), which the caller runs. A cgroup file that cannot be read is logged
// and leaves the runtime's default: it is no reason not to serve.
func setMemoryLimit(log *zap.Logger, setting string, getenv func(string) string) *memlimit.GCTarget {
	lim, err := memlimit.Detect(memlimit.Source{Setting: setting, Getenv: getenv})
	if err != nil {
		log.Warn("memory limit not set", zap.Error(err))
		return nil
	}
	inForce := lim.Apply()
	fields := []zap.Field{zap.String("from", lim.From)}
	if inForce != math.MaxInt64 {
		fields = append(fields, zap.Int64("soft_limit_bytes", inForce))
	}
	if lim.Container > 0 {
		fields = append(fields, zap.Int64("container_limit_bytes", lim.Container), zap.String("file", lim.File))
	}
	gc := lim.GCTarget(inForce, getenv)
	if gc != nil {
		fields = append(fields, zap.Int64("gc_allowance_bytes", gc.Allowance))
	}
	log.Info("memory limit", fields...)
	return gc
}
