package config

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/tlsreload"
	"github.com/extauthz/extauthz/redisstore"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name       string
		edit       func(c *Config)
		wantFields []string
	}{
		{"empty grpc addr", func(c *Config) { c.GRPCAddr = "" }, []string{"grpc_addr"}},
		{"admin addr without port", func(c *Config) { c.AdminAddr = "localhost" }, []string{"admin_addr"}},
		{"log level", func(c *Config) { c.Log.Level = "loud" }, []string{"log.level"}},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, []string{"log.format"}},
		{"cert without key", func(c *Config) { c.TLS.CertFile = "c.pem" }, []string{"tls.key_file"}},
		{"key without cert", func(c *Config) { c.TLS.KeyFile = "k.pem" }, []string{"tls.cert_file"}},
		{"client ca alone", func(c *Config) { c.TLS.ClientCAFile = "ca.pem" }, []string{"tls.client_ca_file"}},
		{"msg size", func(c *Config) { c.GRPC.MaxRecvMsgSize = 0 }, []string{"grpc.max_recv_msg_size"}},
		{"streams", func(c *Config) { c.GRPC.MaxConcurrentStreams = 0 }, []string{"grpc.max_concurrent_streams"}},
		{"workers negative", func(c *Config) { c.GRPC.StreamWorkers = -1 }, []string{"grpc.stream_workers"}},
		{"workers too many", func(c *Config) { c.GRPC.StreamWorkers = MaxStreamWorkers + 1 }, []string{"grpc.stream_workers"}},
		{"keepalive", func(c *Config) {
			c.GRPC.Keepalive = KeepaliveConfig{Time: -1, Timeout: 0, MinTime: -1}
		}, []string{"grpc.keepalive.time", "grpc.keepalive.timeout", "grpc.keepalive.min_time"}},
		{"grace", func(c *Config) { c.ShutdownGrace = 0 }, []string{"shutdown_grace"}},
		{"sweep interval", func(c *Config) { c.SweepInterval = 0 }, []string{"sweep_interval"}},
		{"state budget", func(c *Config) { c.HotParam.StateBudget = "lots" }, []string{"hot_param.state_budget"}},
		{"rule state budget", func(c *Config) { c.HotParam.RuleStateBudget = "0" }, []string{"hot_param.rule_state_budget"}},
		{"overflow", func(c *Config) { c.HotParam.Overflow = "drop" }, []string{"hot_param.overflow"}},
		{"memory limit", func(c *Config) { c.MemoryLimit = "1GB" }, []string{"memory_limit"}},
		{"mapping, by the mapper", func(c *Config) { c.Mapping.Authz.Resource = "{nope}" }, []string{"authz.resource"}},
		{"param name", func(c *Config) { c.ParamNames = []string{"a", " "} }, []string{"param_names[1]"}},
		{"redis mode, by the store", func(c *Config) {
			c.Store.Redis.Addrs = []string{"a:1"}
			c.Store.Redis.Mode = "sentinel"
		}, []string{"store.redis.mode"}},
		{"standalone with two addrs", func(c *Config) { c.Store.Redis.Addrs = []string{"a:1", "b:2"} }, []string{"store.redis.addrs"}},
		{"bad redis addr", func(c *Config) {
			c.Store.Redis.Mode = "cluster"
			c.Store.Redis.Addrs = []string{"a:1", "nohost"}
		}, []string{"store.redis.addrs[1]"}},
		{"redis timeout", func(c *Config) {
			c.Store.Redis.Addrs = []string{"a:1"}
			c.Store.Redis.Timeout = -1
		}, []string{"store.redis.timeout"}},
		{"redis fallback", func(c *Config) { c.Store.Redis.Fallback = "retry" }, []string{"store.redis.fallback"}},
		{"redis replicas", func(c *Config) { c.Store.Redis.Replicas = -1 }, []string{"store.redis.replicas"}},
		{"redis prefix", func(c *Config) {
			c.Store.Redis.Addrs = []string{"a:1"}
			c.Store.Redis.Prefix = "a{b}"
		}, []string{"store.redis.prefix"}},
		{"password without addrs", func(c *Config) { c.Store.Redis.Password = "x" }, []string{"store.redis.addrs"}},
		{"several at once", func(c *Config) {
			c.GRPCAddr = ""
			c.Log.Level = "x"
			c.Store.Redis.Fallback = "x"
		}, []string{"grpc_addr", "log.level", "store.redis.fallback"}},
		{"valid tls", func(c *Config) { c.TLS = tlsreload.Config{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"} }, nil},
		{"valid cluster", func(c *Config) {
			c.Store.Redis.Mode = "cluster"
			c.Store.Redis.Addrs = []string{"a:1", "b:2"}
		}, nil},
		{"keepalive pings off", func(c *Config) { c.GRPC.Keepalive.Time = 0 }, nil},
		{"sensitive param", func(c *Config) { c.Sensitive.Params = []string{"user", ""} }, []string{"sensitive.params[1]"}},
		{"short sensitive key", func(c *Config) { c.Sensitive.Key = "hunter2" }, []string{"sensitive.key"}},
		{"sensitive key", func(c *Config) { c.Sensitive.Key = "0123456789abcdef" }, nil},
		{"allowed_every", func(c *Config) { c.DecisionLog.AllowedEvery = -1 }, []string{"decision_log.allowed_every"}},
		{"max_per_second", func(c *Config) { c.DecisionLog.MaxPerSecond = 0 }, []string{"decision_log.max_per_second"}},
		{"tracing", func(c *Config) {
			c.Tracing.Endpoint = "collector"
			c.Tracing.SampleRatio = 1.5
		}, []string{"tracing.endpoint", "tracing.sample_ratio"}},
		{"tracing on", func(c *Config) { c.Tracing.Endpoint = "collector:4317" }, nil},
		{"admin hosts", func(c *Config) {
			c.Admin.Hosts = []string{"extauthz.extauthz.svc", "*.example.org", "a:9002", "", "-a.b", "*.", "x_y"}
		}, []string{"admin.hosts[2]", "admin.hosts[3]", "admin.hosts[4]", "admin.hosts[5]", "admin.hosts[6]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			tt.edit(&cfg)
			err := cfg.Validate()
			if tt.wantFields == nil {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			var ce Errors
			if !errors.As(err, &ce) {
				t.Fatalf("Validate = %v, want Errors", err)
			}
			var got []string
			for _, fe := range ce {
				got = append(got, fe.Field)
				if fe.Reason == "" {
					t.Errorf("%s: empty reason", fe.Field)
				}
			}
			sort.Strings(got)
			want := append([]string(nil), tt.wantFields...)
			sort.Strings(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("fields = %v, want %v (%v)", got, want, err)
			}
		})
	}
}

// Every store setting can come from the environment.
func TestStoreSettingsFromEnv(t *testing.T) {
	cfg, err := Parse(Source{Getenv: env(map[string]string{
		"EXTAUTHZ_STORE_REDIS_ADDRS":              "a:1,b:2,c:3",
		"EXTAUTHZ_STORE_REDIS_MODE":               "cluster",
		"EXTAUTHZ_STORE_REDIS_USERNAME":           "svc",
		"EXTAUTHZ_STORE_REDIS_PASSWORD":           "secret",
		"EXTAUTHZ_STORE_REDIS_TLS":                "true",
		"EXTAUTHZ_STORE_REDIS_CA_FILE":            "/etc/ca.pem",
		"EXTAUTHZ_STORE_REDIS_TIMEOUT":            "20ms",
		"EXTAUTHZ_STORE_REDIS_BATCH_WAIT":         "2ms",
		"EXTAUTHZ_STORE_REDIS_FALLBACK":           "deny",
		"EXTAUTHZ_STORE_REDIS_REPLICAS":           "4",
		"EXTAUTHZ_STORE_REDIS_PREFIX":             "edge",
		"EXTAUTHZ_STORE_REDIS_BREAKER_FAILURES":   "7",
		"EXTAUTHZ_STORE_REDIS_BREAKER_COOLDOWN":   "250ms",
		"EXTAUTHZ_STORE_REDIS_BLOCKED_CACHE":      "-1",
		"EXTAUTHZ_STORE_REDIS_SAMPLE_INTERVAL":    "3s",
		"EXTAUTHZ_STORE_REDIS_REQUIRE_NOEVICTION": "true",
	})})
	if err != nil {
		t.Fatal(err)
	}
	want := RedisConfig{Config: redisstore.Config{Addrs: []string{"a:1", "b:2", "c:3"}, Mode: "cluster", Username: "svc", Password: "secret",
		TLS: true, CAFile: "/etc/ca.pem", Timeout: 20 * time.Millisecond, BatchWait: 2 * time.Millisecond,
		Prefix: "edge", BreakerFailures: 7, BreakerCooldown: 250 * time.Millisecond, BlockedCache: -1,
		SampleInterval: 3 * time.Second}, Fallback: "deny", Replicas: 4, RequireNoeviction: true}
	if !reflect.DeepEqual(cfg.Store.Redis, want) {
		t.Errorf("store from env\n got %+v\nwant %+v", cfg.Store.Redis, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestCAFileRequiresTLS(t *testing.T) {
	cfg, err := Parse(Source{Getenv: env(map[string]string{"EXTAUTHZ_STORE_REDIS_ADDRS": "a:1", "EXTAUTHZ_STORE_REDIS_CA_FILE": "/ca.pem"})})
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "store.redis.ca_file") {
		t.Errorf("ca_file without tls: got %v, want an error naming store.redis.ca_file", err)
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"CAFile": "ca_file", "GRPCAddr": "grpc_addr", "BreakerFailures": "breaker_failures",
		"TLS": "tls", "Addrs": "addrs", "MaxRecvMsgSize": "max_recv_msg_size",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

// store.redis.book_ahead is read from the environment and bounded: 0 to 1s, and only with the
// cache of blocked values, which holds the bookings.
func TestBookAhead(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want time.Duration
		bad  string
	}{
		{env: map[string]string{"EXTAUTHZ_STORE_REDIS_BOOK_AHEAD": "100ms"}, want: 100 * time.Millisecond},
		{env: map[string]string{"EXTAUTHZ_STORE_REDIS_BOOK_AHEAD": "1s"}, want: time.Second},
		{env: map[string]string{"EXTAUTHZ_STORE_REDIS_BOOK_AHEAD": "1001ms"}, bad: "not between 0 and 1s"},
		{env: map[string]string{"EXTAUTHZ_STORE_REDIS_BOOK_AHEAD": "-1ms"}, bad: "not between 0 and 1s"},
		{env: map[string]string{"EXTAUTHZ_STORE_REDIS_BOOK_AHEAD": "10ms", "EXTAUTHZ_STORE_REDIS_BLOCKED_CACHE": "-1"}, bad: "requires the cache of blocked values"},
	} {
		c.env["EXTAUTHZ_STORE_REDIS_ADDRS"] = "a:1"
		cfg, err := Parse(Source{Getenv: env(c.env)})
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Validate()
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%v: Validate: %v", c.env, err)
		case c.bad == "" && cfg.Store.Redis.BookAhead != c.want:
			t.Errorf("%v: book ahead %v, want %v", c.env, cfg.Store.Redis.BookAhead, c.want)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), "store.redis.book_ahead") || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%v: Validate: %v, want an error naming store.redis.book_ahead: %s", c.env, err, c.bad)
		}
	}
}
