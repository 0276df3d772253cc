package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/extauthz/extauthz/descriptors"
)

// env is a fake environment.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// load parses args as the serve flags and loads the config.
func load(t *testing.T, args []string, vars map[string]string) (Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	addConfigFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return loadConfig(fs, env(vars))
}

func TestDefaults(t *testing.T) {
	cfg, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		GRPCAddr:      ":9001",
		AdminAddr:     "127.0.0.1:9002",
		RulesFile:     "rules.yaml",
		Log:           LogConfig{Level: "info", Format: "json"},
		GRPC:          GRPCConfig{MaxRecvMsgSize: 4 << 20, Keepalive: KeepaliveConfig{Time: 2 * time.Hour, Timeout: 20 * time.Second, MinTime: 10 * time.Second}},
		ShutdownGrace: 15 * time.Second,
		Mapping: descriptors.Config{
			Authz:     descriptors.AuthzConfig{Resource: "{method}:{path}"},
			RateLimit: descriptors.RateLimitConfig{ResourceKey: "resource", OriginKey: "origin"},
		},
		ParamNames:    []string{},
		Store:         StoreConfig{Redis: RedisConfig{Addrs: []string{}, Mode: "standalone", Timeout: 5 * time.Millisecond, Fallback: "local", Replicas: 1}},
		rulesOptional: true,
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("defaults\n got %+v\nwant %+v", cfg, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "extauthz.yaml", `
grpc_addr: "file:1"
admin_addr: "file:2"
rules_file: file-rules.yaml
log: {level: warn, format: console}
shutdown_grace: 3s
grpc:
  keepalive: {time: 1m}
store:
  redis:
    addrs: ["file:6379"]
    timeout: 7ms
`)
	tests := []struct {
		name  string
		args  []string
		vars  map[string]string
		check func(c Config) (got, want any)
	}{
		{"file over default", []string{"--config", file}, nil,
			func(c Config) (any, any) { return c.GRPCAddr, "file:1" }},
		{"env over file", []string{"--config", file}, map[string]string{"EXTAUTHZ_GRPC_ADDR": "env:1"},
			func(c Config) (any, any) { return c.GRPCAddr, "env:1" }},
		{"flag over env", []string{"--config", file, "--grpc-addr", "flag:1"}, map[string]string{"EXTAUTHZ_GRPC_ADDR": "env:1"},
			func(c Config) (any, any) { return c.GRPCAddr, "flag:1" }},
		{"flag over file", []string{"--config", file, "--admin-addr=flag:2"}, nil,
			func(c Config) (any, any) { return c.AdminAddr, "flag:2" }},
		{"env over default without file", nil, map[string]string{"EXTAUTHZ_ADMIN_ADDR": "env:2"},
			func(c Config) (any, any) { return c.AdminAddr, "env:2" }},
		{"nested env over file", []string{"--config", file}, map[string]string{"EXTAUTHZ_LOG_LEVEL": "debug"},
			func(c Config) (any, any) { return c.Log, LogConfig{Level: "debug", Format: "console"} }},
		{"nested flag over env", []string{"--config", file, "--log-level", "error"}, map[string]string{"EXTAUTHZ_LOG_LEVEL": "debug"},
			func(c Config) (any, any) { return c.Log.Level, "error" }},
		{"rules flag", []string{"--config", file, "--rules", "flag-rules.yaml"}, map[string]string{"EXTAUTHZ_RULES_FILE": "env-rules.yaml"},
			func(c Config) (any, any) { return c.RulesFile, "flag-rules.yaml" }},
		{"rules env", []string{"--config", file}, map[string]string{"EXTAUTHZ_RULES_FILE": "env-rules.yaml"},
			func(c Config) (any, any) { return c.RulesFile, "env-rules.yaml" }},
		{"duration from env", []string{"--config", file}, map[string]string{"EXTAUTHZ_SHUTDOWN_GRACE": "250ms"},
			func(c Config) (any, any) { return c.ShutdownGrace, 250 * time.Millisecond }},
		{"duration from file", []string{"--config", file}, nil,
			func(c Config) (any, any) { return c.ShutdownGrace, 3 * time.Second }},
		{"deep env over file", []string{"--config", file}, map[string]string{"EXTAUTHZ_GRPC_KEEPALIVE_TIME": "30s"},
			func(c Config) (any, any) {
				return c.GRPC.Keepalive, KeepaliveConfig{Time: 30 * time.Second, Timeout: 20 * time.Second, MinTime: 10 * time.Second}
			}},
		{"list from env", []string{"--config", file}, map[string]string{"EXTAUTHZ_STORE_REDIS_ADDRS": "a:1, b:2", "EXTAUTHZ_STORE_REDIS_MODE": "cluster"},
			func(c Config) (any, any) { return c.Store.Redis.Addrs, []string{"a:1", "b:2"} }},
		{"file keeps siblings of an env override", []string{"--config", file}, map[string]string{"EXTAUTHZ_STORE_REDIS_ADDRS": "env:6379"},
			func(c Config) (any, any) { return c.Store.Redis.Timeout, 7 * time.Millisecond }},
		{"int from env", nil, map[string]string{"EXTAUTHZ_GRPC_MAX_RECV_MSG_SIZE": "1024"},
			func(c Config) (any, any) { return c.GRPC.MaxRecvMsgSize, 1024 }},
		{"bool from env", nil, map[string]string{"EXTAUTHZ_STORE_REDIS_TLS": "true"},
			func(c Config) (any, any) { return c.Store.Redis.TLS, true }},
		{"param names from env", nil, map[string]string{"EXTAUTHZ_PARAM_NAMES": "itemId,userId"},
			func(c Config) (any, any) { return c.ParamNames, []string{"itemId", "userId"} }},
		{"empty env is unset", []string{"--config", file}, map[string]string{"EXTAUTHZ_GRPC_ADDR": ""},
			func(c Config) (any, any) { return c.GRPCAddr, "file:1" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := load(t, tt.args, tt.vars)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tt.check(cfg); !reflect.DeepEqual(got, want) {
				t.Errorf("got %#v, want %#v", got, want)
			}
		})
	}
}

func TestRulesFileOptional(t *testing.T) {
	dir := t.TempDir()
	withRules := writeFile(t, dir, "a.yaml", "rules_file: r.yaml\n")
	without := writeFile(t, dir, "b.yaml", "grpc_addr: \":1\"\n")
	tests := []struct {
		name         string
		args         []string
		vars         map[string]string
		wantFile     string
		wantOptional bool
	}{
		{"built-in default", nil, nil, "rules.yaml", true},
		{"config file without rules_file", []string{"--config", without}, nil, "rules.yaml", true},
		{"config file", []string{"--config", withRules}, nil, "r.yaml", false},
		{"env", nil, map[string]string{"EXTAUTHZ_RULES_FILE": "e.yaml"}, "e.yaml", false},
		{"flag", []string{"--rules", "f.yaml"}, nil, "f.yaml", false},
		// An explicitly named default file must exist.
		{"flag naming the default", []string{"--rules", "rules.yaml"}, nil, "rules.yaml", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := load(t, tt.args, tt.vars)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RulesFile != tt.wantFile || cfg.rulesOptional != tt.wantOptional {
				t.Errorf("rules %q optional %v, want %q optional %v", cfg.RulesFile, cfg.rulesOptional, tt.wantFile, tt.wantOptional)
			}
		})
	}
}

func TestUnknownKeysRejected(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantIn  string
	}{
		{"top level", "grpc_adr: \":1\"\n", "grpc_adr"},
		{"nested", "log: {level: info, colour: true}\n", "colour"},
		{"deep", "store: {redis: {addrs: [\"a:1\"], pasword: x}}\n", "pasword"},
		{"mapping", "authz: {resource: \"{path}\", orign: []}\n", "orign"},
		{"source", "authz: {params: {item: {from: query, nme: item}}}\n", "nme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, t.TempDir(), "c.yaml", tt.content)
			_, err := load(t, []string{"--config", file}, nil)
			if err == nil {
				t.Fatalf("config %q loaded without error", tt.content)
			}
			if !strings.Contains(err.Error(), tt.wantIn) || !strings.Contains(err.Error(), file) {
				t.Errorf("error %q does not name %q and the file", err, tt.wantIn)
			}
		})
	}
}

func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		vars map[string]string
	}{
		{"missing file", []string{"--config", filepath.Join(dir, "nope.yaml")}, nil},
		{"bad yaml", []string{"--config", writeFile(t, dir, "bad.yaml", "grpc_addr: [\n")}, nil},
		{"wrong type", []string{"--config", writeFile(t, dir, "type.yaml", "grpc: {max_recv_msg_size: lots}\n")}, nil},
		{"bad duration", []string{"--config", writeFile(t, dir, "dur.yaml", "shutdown_grace: soon\n")}, nil},
		{"bad duration from env", nil, map[string]string{"EXTAUTHZ_SHUTDOWN_GRACE": "soon"}},
		{"case clash", []string{"--config", writeFile(t, dir, "case.yaml",
			"authz: {params: {itemId: {from: query, name: a}, itemid: {from: query, name: b}}}\n")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := load(t, tt.args, tt.vars); err == nil {
				t.Error("loaded without error")
			}
		})
	}
}

func TestMappingFromFile(t *testing.T) {
	file := writeFile(t, t.TempDir(), "m.yaml", `
authz:
  resource: "{host}{path}"
  origin:
    - {from: principal}
    - {from: header, name: x-origin}
  params:
    itemId: {from: query, name: itemId, split: ","}
    client: {from: client_ip}
  trusted_hops: 1
ratelimit: {resource_key: res, origin_key: caller}
param_names: [itemId, client]
`)
	cfg, err := load(t, []string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := descriptors.Config{
		Authz: descriptors.AuthzConfig{
			Resource: "{host}{path}",
			Origin:   []descriptors.Source{{From: "principal"}, {From: "header", Name: "x-origin"}},
			Params: map[string]descriptors.Source{
				// The param name keeps its case: rules match it exactly.
				"itemId": {From: "query", Name: "itemId", Split: ","},
				"client": {From: "client_ip"},
			},
			TrustedHops: 1,
		},
		RateLimit: descriptors.RateLimitConfig{ResourceKey: "res", OriginKey: "caller"},
	}
	if !reflect.DeepEqual(cfg.Mapping, want) {
		t.Errorf("mapping\n got %+v\nwant %+v", cfg.Mapping, want)
	}
	if got, want := cfg.ParamNames, []string{"itemId", "client"}; !reflect.DeepEqual(got, want) {
		t.Errorf("param_names = %v, want %v", got, want)
	}
}

// The config shipped for the compose stack loads and validates.
func TestShippedConfig(t *testing.T) {
	cfg, err := load(t, []string{"--config", "../../envoy-config/extauthz.yaml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := descriptors.New(cfg.Mapping); err != nil {
		t.Fatalf("mapping: %v", err)
	}
}

func TestValidate(t *testing.T) {
	base := func() Config {
		cfg, err := load(t, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
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
		{"keepalive", func(c *Config) {
			c.GRPC.Keepalive = KeepaliveConfig{Time: -1, Timeout: 0, MinTime: -1}
		}, []string{"grpc.keepalive.time", "grpc.keepalive.timeout", "grpc.keepalive.min_time"}},
		{"grace", func(c *Config) { c.ShutdownGrace = 0 }, []string{"shutdown_grace"}},
		{"param name", func(c *Config) { c.ParamNames = []string{"a", " "} }, []string{"param_names[1]"}},
		{"redis mode", func(c *Config) { c.Store.Redis.Mode = "sentinel" }, []string{"store.redis.mode"}},
		{"standalone with two addrs", func(c *Config) { c.Store.Redis.Addrs = []string{"a:1", "b:2"} }, []string{"store.redis.addrs"}},
		{"bad redis addr", func(c *Config) {
			c.Store.Redis.Mode = "cluster"
			c.Store.Redis.Addrs = []string{"a:1", "nohost"}
		}, []string{"store.redis.addrs[1]"}},
		{"redis timeout", func(c *Config) { c.Store.Redis.Timeout = 0 }, []string{"store.redis.timeout"}},
		{"redis fallback", func(c *Config) { c.Store.Redis.Fallback = "retry" }, []string{"store.redis.fallback"}},
		{"redis replicas", func(c *Config) { c.Store.Redis.Replicas = -1 }, []string{"store.redis.replicas"}},
		{"redis prefix", func(c *Config) { c.Store.Redis.Prefix = "a{b}" }, []string{"store.redis.prefix"}},
		{"redis breaker", func(c *Config) {
			c.Store.Redis.BreakerFailures = -1
			c.Store.Redis.BreakerCooldown = -1
		}, []string{"store.redis.breaker_failures", "store.redis.breaker_cooldown"}},
		{"password without addrs", func(c *Config) { c.Store.Redis.Password = "x" }, []string{"store.redis.addrs"}},
		{"several at once", func(c *Config) {
			c.GRPCAddr = ""
			c.Log.Level = "x"
			c.Store.Redis.Fallback = "x"
		}, []string{"grpc_addr", "log.level", "store.redis.fallback"}},
		{"valid tls", func(c *Config) { c.TLS = TLSConfig{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"} }, nil},
		{"valid cluster", func(c *Config) {
			c.Store.Redis.Mode = "cluster"
			c.Store.Redis.Addrs = []string{"a:1", "b:2"}
		}, nil},
		{"keepalive pings off", func(c *Config) { c.GRPC.Keepalive.Time = 0 }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base()
			tt.edit(&cfg)
			err := cfg.Validate()
			if tt.wantFields == nil {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			var ce ConfigErrors
			if !errors.As(err, &ce) {
				t.Fatalf("Validate = %v, want ConfigErrors", err)
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
			for _, f := range want {
				if !strings.Contains(err.Error(), f+": ") {
					t.Errorf("message %q does not address %s", err, f)
				}
			}
		})
	}
}
