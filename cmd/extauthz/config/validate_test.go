package config

import (
	"errors"
	"strings"
	"testing"
)

// Validate reports every problem of every section, each message exactly, always in the same
// order.
func TestValidateEverySectionInOrder(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
		want []string
	}{
		{"every section broken", func(c *Config) {
			c.GRPCAddr = "9001"
			c.AdminAddr = ""
			c.Admin.HotWindow = -1
			c.Admin.Hosts = []string{"a:1"}
			c.Admin.FleetInterval = 0
			c.Log.Level = "inf"
			c.Log.Format = "xml"
			c.TLS.CertFile = "c.pem"
			c.GRPC = GRPCConfig{MaxRecvMsgSize: 0, MaxConcurrentStreams: 0, StreamWorkers: -1,
				Keepalive: KeepaliveConfig{Time: -1, Timeout: 0, MinTime: -1}}
			c.ShutdownGrace = 0
			c.SweepInterval = 0
			c.HotParam = HotParamConfig{StateBudget: "lots", RuleStateBudget: "0", Overflow: "drop"}
			c.MemoryLimit = "1GB"
			c.Mapping.Authz.Resource = "{nope}"
			c.ParamNames = []string{"a", " "}
			c.Decision.MaxWaiting = -1
			c.Store.Redis.Addrs = []string{"a:1"}
			c.Store.Redis.Mode = "sentinel"
			c.Store.Redis.Fallback = "locale"
			c.Store.Redis.Replicas = -1
			c.RulesFile = "rules.yaml"
			c.RulesEtcd.Endpoints = []string{"e:2379"}
			c.RulesEtcd.Keys = []string{"k", "k"}
			c.Sensitive = SensitiveConfig{Params: []string{""}, Key: "short"}
			c.Tracing = TracingConfig{Endpoint: "collector", SampleRatio: 2}
			c.DecisionLog = DecisionLogConfig{AllowedEvery: -1, MaxPerSecond: 0}
			c.SentinelDashboard.Addrs = []string{"dashboard"}
			c.SentinelDashboard.EtcdKey = "other"
		}, []string{
			`grpc_addr: must be host:port, not "9001"`,
			`admin_addr: must not be empty`,
			`admin.hot_window: must not be negative, not -1ns`,
			`admin.hosts[0]: must be a host name (or *. and a host name), without a port, not "a:1"`,
			`admin.fleet_interval: must be from 1s to 10s, not 0s`,
			`log.level: must be debug, info, warn or error, not "inf" (did you mean "info"?)`,
			`log.format: must be json or console, not "xml"`,
			`tls.key_file: required with cert_file`,
			`grpc.max_recv_msg_size: must be > 0 bytes, not 0`,
			`grpc.max_concurrent_streams: must be between 1 and 4294967295, not 0`,
			`grpc.stream_workers: must be between 0 and 65536, not -1`,
			`grpc.keepalive.time: must not be negative, not -1ns`,
			`grpc.keepalive.timeout: must be > 0, not 0s`,
			`grpc.keepalive.min_time: must not be negative, not -1ns`,
			`shutdown_grace: must be > 0, not 0s`,
			`sweep_interval: must be > 0, not 0s`,
			`hot_param.state_budget: "lots" is not a memory size: write a whole number of bytes with a unit B, KiB, MiB, GiB or TiB, like 512MiB`,
			`hot_param.rule_state_budget: "0" is not a memory size: write a whole number of bytes with a unit B, KiB, MiB, GiB or TiB, like 512MiB`,
			`hot_param.overflow: must be forget or refuse, not "drop"`,
			`memory_limit: "1GB" is not a memory size: write a whole number of bytes with a unit B, KiB, MiB, GiB or TiB, like 512MiB, or off`,
			`authz.resource: unknown placeholder {nope} (want {method}, {path} or {host})`,
			`param_names[1]: must not be empty`,
			`decision.max_waiting: must not be negative, not -1`,
			`store.redis.fallback: must be local, allow or deny, not "locale" (did you mean "local"?)`,
			`store.redis.replicas: must not be negative, not -1`,
			`store.redis.mode: "sentinel" is not standalone or cluster`,
			`rules_etcd.keys[1]: "k" is listed twice`,
			`rules_etcd.endpoints: the rules come from rules_file or from rules_etcd, not both: unset rules_file`,
			`sensitive.params[0]: must not be empty`,
			`sensitive.key: must be at least 16 bytes, not 5`,
			`tracing.endpoint: must be host:port, not "collector"`,
			`tracing.sample_ratio: must be from 0 to 1, not 2`,
			`decision_log.allowed_every: must not be negative, not -1`,
			`sentinel_dashboard.addrs[0]: must be host:port (the dashboard's server port), not "dashboard"`,
			`sentinel_dashboard.command_addr: required when addrs are set: the dashboard reaches each machine on its command port`,
			`sentinel_dashboard.etcd_key: must be one of rules_etcd.keys, not "other"`,
			`decision_log.max_per_second: must be at least 1, not 0`,
		}},
		{"redis settings without addrs", func(c *Config) {
			c.Store.Redis.Password = "x"
		}, []string{`store.redis.addrs: required when other store.redis connection settings are set`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			tt.edit(&cfg)
			var ce Errors
			if err := cfg.Validate(); !errors.As(err, &ce) {
				t.Fatalf("Validate = %v, want Errors", err)
			}
			var got []string
			for _, fe := range ce {
				got = append(got, fe.Field+": "+fe.Reason)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Validate reports\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
