// Package config is the service configuration: one struct composed of the libraries' own
// config types, its defaults, its loading from a YAML file, EXTAUTHZ_* environment variables
// and command-line overrides, and its validation.
package config

import (
	"time"

	"github.com/extauthz/extauthz/dashboard"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/etcdrules"
	"github.com/extauthz/extauthz/internal/observe"
	"github.com/extauthz/extauthz/internal/tlsreload"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/redisstore"
)

// DefaultRulesFile is read when present and no rules file is configured.
const DefaultRulesFile = "rules.yaml"

// Config is the whole service configuration. Its keys are the json names of its fields (or,
// for a field without one, the field name in snake case: CAFile is ca_file), joined with dots;
// each key's environment variable is EXTAUTHZ_ and the key upper-cased with dots as
// underscores (see Keys). The zero value is not usable: start from Default or Load.
type Config struct {
	// GRPCAddr is the address of the gRPC listener (both APIs, health, reflection).
	GRPCAddr string `json:"grpc_addr"`
	// AdminAddr is the address of the admin HTTP listener.
	AdminAddr string `json:"admin_addr"`
	// RulesFile is the rules file, watched; when set explicitly it must exist (a relative path is taken
	// from the working directory; `--rules ""` runs with no rules).
	RulesFile string `json:"rules_file"`
	// RulesOptional is set by Load when RulesFile is the built-in default, which nobody named:
	// a missing file then means an empty rule set rather than an error.
	RulesOptional bool             `json:"-"`
	Admin         AdminConfig      `json:"admin"`
	Log           LogConfig        `json:"log"`
	TLS           tlsreload.Config `json:"tls"`
	GRPC          GRPCConfig       `json:"grpc"`
	// ShutdownGrace is how long in-flight calls get on shutdown; throttled calls whose turn comes
	// later are refused (`shutting_down`) at once.
	ShutdownGrace time.Duration `json:"shutdown_grace"`
	// SweepInterval is how often hot-param values back to their default state (full bucket, nothing
	// in flight) and not asked for in their rule's current or previous window are forgotten, so
	// memory and `extauthz_hotparam_tracked_values` follow the values in use; forgetting one
	// changes no decision.
	SweepInterval time.Duration `json:"sweep_interval"`
	// HotParam bounds the hot-param state kept of evicted values.
	HotParam HotParamConfig `json:"hot_param"`
	// MemoryLimit is Go's soft memory limit. Empty: 90% of the container's limit (cgroup v2
	// `memory.max`, else v1 `memory.limit_in_bytes`; none without one, and `GOMEMLIMIT` when set
	// stays in force); `off`: none; a size (`512MiB`, `2GiB`, bytes) sets it. Logged at start as
	// `memory limit`, with `gc_allowance_bytes`. Under a limit, and unless `GOGC` is set, the
	// collector's target follows the live heap: garbage may grow by a 32nd of the limit past the
	// live heap between collections, at least a quarter and at most 4x the live heap (GOGC 25 to
	// 400, see memlimit.GCTarget). A small state then spends a fraction of the collector time of
	// Go's default (GOGC 100) on the garbage of requests, and a large one (a million tracked
	// values) holds a resident size close to its live heap instead of up to twice it; near the
	// limit the collector runs more often still. Without a limit (none found, no setting) the
	// target follows the live heap too, with 32MiB of garbage, never below Go's default: GOGC
	// 400 for a live heap of up to 8MiB, 100 from 32MiB on, at most 24MiB more heap than Go's
	// default holds. Whatever the setting, a rules load during which the heap allocated 32MiB
	// or more (a first load of about 6,000 rules and up), or that dropped as many rules' worth,
	// collects its garbage and returns the pages once it is done, so that an idle replica's
	// resident size follows the rules in force. `off` keeps Go's defaults: no limit and GOGC
	// 100.
	MemoryLimit string `json:"memory_limit"`
	// Mapping turns Envoy's requests into resources, origins and params; its keys (authz,
	// ratelimit) sit at the top level.
	Mapping descriptors.Config `json:",inline"`
	// ParamNames are the param names for Sentinel's `paramIdx` (index i names `param_names[i]`).
	ParamNames []string    `json:"param_names"`
	Store      StoreConfig `json:"store"`
	// RulesEtcd, when its endpoints are set, is where the rules come from instead of the file.
	RulesEtcd etcdrules.Config `json:"rules_etcd"`
	// Sensitive says which params' values are shown only as a keyed hash.
	Sensitive SensitiveConfig `json:"sensitive"`
	// DecisionLog is the log of each call's decision.
	DecisionLog DecisionLogConfig `json:"decision_log"`
	// Tracing sends a span per decision to an OpenTelemetry collector.
	Tracing TracingConfig `json:"tracing"`
	// Decision tunes the decision path: the cap on throttled requests waiting, dry run.
	Decision policy.Config `json:"decision"`
	// SentinelDashboard makes the service a machine of a Sentinel dashboard (package dashboard).
	SentinelDashboard dashboard.Config `json:"sentinel_dashboard"`
}

// HotParamConfig bounds the states kept of the values a hot-param rule evicted while not back
// to their default (16 bytes each; see hotparam's flood.go): StateBudget over all rules,
// RuleStateBudget for each rule (sizes like 128MiB). Overflow is what a rule does past them:
// forget (the states that end soonest: a forgotten value gets its allowance back) or refuse
// (new values, until states end: no limit is exceeded).
type HotParamConfig struct {
	// StateBudget is the most memory, over all hot-param rules, kept for the states of values
	// evicted while not back to their default (16 bytes a value; see [Floods and
	// eviction](security.md#floods-and-eviction)).
	StateBudget string `json:"state_budget"`
	// RuleStateBudget is the same for each rule: holds a flood of 10,000 new values a second for 10
	// minutes on a rule of 3 an hour.
	RuleStateBudget string `json:"rule_state_budget"`
	// Overflow is what a rule does once its budget (or the whole one) is full: `forget` the states
	// that end soonest (a forgotten value gets its allowance back; nobody is refused for lack of
	// room) or `refuse` new values until states end (no limit is exceeded); counted in
	// `extauthz_hotparam_state_overflows_total` and logged, once a second at most.
	Overflow string `json:"overflow"`
}

// TracingConfig is the OTLP/gRPC export of spans (package tracing): off while Endpoint is "".
type TracingConfig struct {
	// Endpoint is the OpenTelemetry collector, `host:port` of its OTLP/gRPC receiver; unset: no tracing
	// (see [Tracing](operations.md#tracing)).
	Endpoint string `json:"endpoint"` // collector, host:port
	// Insecure sends spans in plaintext instead of TLS.
	Insecure bool `json:"insecure"` // plaintext instead of TLS
	// SampleRatio is the share of calls traced when Envoy sent no sampling decision, `0` to `1`;
	// Envoy's decision is always followed.
	SampleRatio float64 `json:"sample_ratio"` // share of calls without Envoy's decision traced
}

// DecisionLogConfig says which decisions are logged (package internal/observe): every block
// when Enabled, and one allowed call in AllowedEvery (0: none), at most MaxPerSecond lines a
// second (the others are counted and reported in one line a second).
type DecisionLogConfig struct {
	// Enabled logs every block of Check and ShouldRateLimit (see [Decision
	// logs](operations.md#decision-logs)).
	Enabled bool `json:"enabled"`
	// AllowedEvery also logs one allowed call in this many (`1`: every one); `0` logs none.
	AllowedEvery int `json:"allowed_every"`
	// MaxPerSecond is the most decision lines a second (blocks and sampled allows together); the others
	// are counted in `extauthz_decision_log_suppressed_total` and reported in one `decision lines
	// suppressed` line a second; at least `1`.
	MaxPerSecond int `json:"max_per_second"`
}

// SensitiveConfig marks params whose values are secrets (package redact): besides the params
// named like a credential, those listed in Params; their values are shown as HMAC-SHA256
// hashes under Key (at least redact.MinKeyLen bytes; "" means a random key per process).
type SensitiveConfig struct {
	// Params are the params whose values are shown only hashed, besides those named like a credential
	// (see [Sensitive params](security.md#sensitive-params)).
	Params []string `json:"params"`
	// Key is the HMAC key of the hashes, at least 16 bytes (never logged); unset: a random key per
	// process.
	Key string `json:"key"`
}

// AdminConfig tunes the admin HTTP listener (its address is AdminAddr).
type AdminConfig struct {
	// PProf serves Go's profiles under `/debug/pprof/` on the admin listener (a CPU profile or
	// trace costs while it runs; the listener has no auth, keep it on loopback).
	PProf bool `json:"pprof"`
	// HotWindow is the window of `/hot`'s and the console's counts (the current window and the one
	// before, aligned on Unix time); `0s`: each rule's own `duration` (a second for concurrency
	// rules), at least `1s` either way.
	HotWindow time.Duration `json:"hot_window"`
	// Hosts are the names the admin listener answers to in the `Host` header, besides `localhost` (and
	// names under `.localhost`) and IP addresses; `*.example.org` accepts every name below it. Any
	// other name gets 421, so that a page a DNS rebinding points at the listener (through a
	// port-forward, say) cannot read `/rules`, `/hot` or the console. Add the names you reach it
	// by, e.g. a Service's `extauthz.extauthz.svc`.
	Hosts []string `json:"hosts"`
	// FleetInterval is, with `store.redis`, how often each replica publishes its per-second counts
	// to Redis for the console's fleet view (one record of at most 16 KiB a replica, kept three
	// intervals); from `1s` to `10s`.
	FleetInterval time.Duration `json:"fleet_interval"`
}

// LogConfig configures logging.
type LogConfig struct {
	// Level is one of `debug`, `info`, `warn`, `error`.
	Level string `json:"level"` // debug | info | warn | error
	// Format is `json` or `console`.
	Format string `json:"format"` // json | console
}

// GRPCConfig tunes the gRPC server.
type GRPCConfig struct {
	// MaxRecvMsgSize is the largest request, in bytes.
	MaxRecvMsgSize int `json:"max_recv_msg_size"`
	// MaxConcurrentStreams is the most calls in flight on one client connection (throttled calls
	// included); a client sends more as earlier ones end, so one connection cannot pile up
	// unbounded goroutines and memory.
	MaxConcurrentStreams int `json:"max_concurrent_streams"`
	// StreamWorkers is the number of long-lived goroutines that run calls; a call that finds them all busy gets a
	// goroutine of its own; `0`: every call gets its own. A call on a new goroutine grows its stack
	// as it goes (a check's path is deeper than a new goroutine's first stack), a worker keeps its
	// grown stack: see [Performance](performance.md). Idle workers hold a few KB each.
	StreamWorkers int             `json:"stream_workers"`
	Keepalive     KeepaliveConfig `json:"keepalive"`
}

// KeepaliveConfig is the server's keepalive pings and its enforcement on clients.
type KeepaliveConfig struct {
	// Time pings a client idle this long; `0s` never pings.
	Time    time.Duration `json:"time"`    // ping a client idle this long; 0 means never
	Timeout time.Duration `json:"timeout"` // close a connection whose ping is unanswered this long
	// MinTime disconnects clients pinging more often.
	MinTime time.Duration `json:"min_time"` // shortest ping interval allowed to clients
}

// StoreConfig selects where the state of cluster rules lives; without Redis addresses it is
// in memory.
type StoreConfig struct {
	Redis RedisConfig `json:"redis"`
}

// RedisConfig is the shared store of `cluster: true` rules: the Redis store's own Config (its
// keys sit in this section) and what the rules do while Redis fails.
type RedisConfig struct {
	redisstore.Config `json:",inline"`
	// Fallback is what a replica does when Redis fails: `local` (this replica's own state), `allow`, `deny`.
	Fallback string `json:"fallback"`
	// Replicas is the number the `local` fallback divides counts by, rounded down, so that the
	// replicas together never exceed a rule (see "The local fallback's share" in [Cluster mode](cluster-mode.md)).
	// Left at `1` with Redis and the `local` fallback, it is warned of at start
	// (`store.redis.replicas is 1: ...`). A replica cannot see the fleet's size without the
	// Kubernetes API, so whether it matches is not checked at run time: the Helm chart and the
	// kustomize overlay set it from the same values as the Deployment and its autoscaler
	// (`maxReplicas`), and their tests check that they agree.
	Replicas int `json:"replicas"`
	// RequireNoeviction refuses to start when a Redis master's `maxmemory-policy` may evict keys
	// (any but `noeviction`); `false`: a warning (see "Keeping limits in Redis" in [Cluster
	// mode](cluster-mode.md)).
	RequireNoeviction bool `json:"require_noeviction"`
}

// Enabled reports whether a Redis store is configured.
func (c RedisConfig) Enabled() bool { return len(c.Addrs) > 0 }

// DefaultStreamWorkers is grpc.stream_workers unless set: enough for the calls in flight of a
// busy replica in Redis mode (each waits one round trip), few enough that idle workers hold
// little memory (a parked goroutine and its stack, typically 8–16 KB each).
const DefaultStreamWorkers = 64

// MaxStreamWorkers bounds grpc.stream_workers: workers are started at once and never idle out.
const MaxStreamWorkers = 65536

// Default is the built-in configuration: gRPC on :9001, admin HTTP on loopback, no rules file
// named (Load then picks DefaultRulesFile when present), in-memory state.
func Default() Config {
	return Config{
		GRPCAddr:  ":9001",
		AdminAddr: "127.0.0.1:9002",
		Admin:     AdminConfig{FleetInterval: 5 * time.Second},
		Log:       LogConfig{Level: "info", Format: "json"},
		GRPC: GRPCConfig{
			MaxRecvMsgSize:       4 << 20,
			MaxConcurrentStreams: 1024,
			StreamWorkers:        DefaultStreamWorkers,
			Keepalive:            KeepaliveConfig{Time: 2 * time.Hour, Timeout: 20 * time.Second, MinTime: 10 * time.Second},
		},
		ShutdownGrace: 15 * time.Second,
		SweepInterval: time.Minute,
		HotParam:      HotParamConfig{StateBudget: "256MiB", RuleStateBudget: "128MiB", Overflow: "forget"},
		Mapping: descriptors.Config{
			Authz: descriptors.AuthzConfig{Resource: descriptors.DefaultResource},
			RateLimit: descriptors.RateLimitConfig{
				ResourceKey: descriptors.DefaultResourceKey,
				OriginKey:   descriptors.DefaultOriginKey,
				LeaseKey:    descriptors.DefaultLeaseKey,
			},
		},
		ParamNames: []string{},
		Store: StoreConfig{Redis: RedisConfig{
			Config: redisstore.Config{
				Addrs:           []string{},
				Mode:            redisstore.ModeStandalone,
				Timeout:         redisstore.DefaultTimeout,
				BatchWait:       redisstore.DefaultBatchWait,
				Prefix:          redisstore.DefaultPrefix,
				BreakerFailures: redisstore.DefaultBreakerFailures,
				BreakerCooldown: redisstore.DefaultBreakerCooldown,
				BlockedCache:    redisstore.DefaultBlockedCache,
				SampleInterval:  redisstore.DefaultSampleInterval,
			},
			Fallback: "local",
			Replicas: 1,
		}},
		RulesEtcd: etcdrules.Config{Endpoints: []string{}, Keys: []string{}, DialTimeout: etcdrules.DefaultDialTimeout,
			CheckInterval: etcdrules.DefaultCheckInterval},
		Sensitive:   SensitiveConfig{Params: []string{}},
		DecisionLog: DecisionLogConfig{Enabled: true, MaxPerSecond: observe.DefaultMaxPerSecond},
		Tracing:     TracingConfig{SampleRatio: 1},
		Decision:    policy.Config{MaxWaiting: policy.DefaultMaxWaiting},
		SentinelDashboard: dashboard.Config{Addrs: []string{}, App: dashboard.DefaultApp,
			HeartbeatInterval: dashboard.DefaultHeartbeatInterval, AllowedCallers: []string{}},
	}
}
