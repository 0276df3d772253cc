package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/dashboard"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/etcdrules"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/redisstore"
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

func TestDefaults(t *testing.T) {
	cfg, err := Load(Source{})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		GRPCAddr:      ":9001",
		AdminAddr:     "127.0.0.1:9002",
		RulesFile:     "rules.yaml",
		RulesOptional: true,
		Admin:         AdminConfig{FleetInterval: 5 * time.Second},
		Log:           LogConfig{Level: "info", Format: "json"},
		GRPC:          GRPCConfig{MaxRecvMsgSize: 4 << 20, MaxConcurrentStreams: 1024, StreamWorkers: 64, Keepalive: KeepaliveConfig{Time: 2 * time.Hour, Timeout: 20 * time.Second, MinTime: 10 * time.Second}},
		ShutdownGrace: 15 * time.Second,
		SweepInterval: time.Minute,
		HotParam:      HotParamConfig{StateBudget: "256MiB", RuleStateBudget: "128MiB", Overflow: "forget"},
		Mapping: descriptors.Config{
			Authz:     descriptors.AuthzConfig{Resource: "{method}:{path}"},
			RateLimit: descriptors.RateLimitConfig{ResourceKey: "resource", OriginKey: "origin", LeaseKey: "lease_id"},
		},
		ParamNames: []string{},
		Store: StoreConfig{Redis: RedisConfig{
			Config: redisstore.Config{Addrs: []string{}, Mode: "standalone", Timeout: 5 * time.Millisecond,
				BatchWait: time.Millisecond, Prefix: "extauthz", BreakerFailures: 3, BreakerCooldown: time.Second, BlockedCache: 10000,
				SampleInterval: 10 * time.Second},
			Fallback: "local", Replicas: 1,
		}},
		RulesEtcd:   etcdrules.Config{Endpoints: []string{}, Keys: []string{}, DialTimeout: 5 * time.Second, CheckInterval: 10 * time.Second},
		Sensitive:   SensitiveConfig{Params: []string{}},
		DecisionLog: DecisionLogConfig{Enabled: true, MaxPerSecond: 100},
		Tracing:     TracingConfig{SampleRatio: 1},
		Decision:    policy.Config{MaxWaiting: 4096},
		SentinelDashboard: dashboard.Config{Addrs: []string{}, App: "extauthz", HeartbeatInterval: 10 * time.Second,
			AllowedCallers: []string{}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("defaults\n got %+v\nwant %+v", cfg, want)
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
ratelimit: {lease_key: file_lease}
store:
  redis:
    addrs: ["file:6379"]
    timeout: 7ms
`)
	flag := func(key, value string) []Override { return []Override{{Key: key, Value: value, From: "--flag"}} }
	tests := []struct {
		name      string
		file      string
		vars      map[string]string
		overrides []Override
		check     func(c Config) (got, want any)
	}{
		{"file over default", file, nil, nil, func(c Config) (any, any) { return c.GRPCAddr, "file:1" }},
		{"env over file", file, map[string]string{"EXTAUTHZ_GRPC_ADDR": "env:1"}, nil,
			func(c Config) (any, any) { return c.GRPCAddr, "env:1" }},
		{"override over env", file, map[string]string{"EXTAUTHZ_GRPC_ADDR": "env:1"}, flag("grpc_addr", "flag:1"),
			func(c Config) (any, any) { return c.GRPCAddr, "flag:1" }},
		{"env over default without file", "", map[string]string{"EXTAUTHZ_ADMIN_ADDR": "env:2"}, nil,
			func(c Config) (any, any) { return c.AdminAddr, "env:2" }},
		{"nested env over file", file, map[string]string{"EXTAUTHZ_LOG_LEVEL": "debug"}, nil,
			func(c Config) (any, any) { return c.Log, LogConfig{Level: "debug", Format: "console"} }},
		{"duration from env", file, map[string]string{"EXTAUTHZ_SHUTDOWN_GRACE": "250ms"}, nil,
			func(c Config) (any, any) { return c.ShutdownGrace, 250 * time.Millisecond }},
		{"duration from file", file, nil, nil, func(c Config) (any, any) { return c.ShutdownGrace, 3 * time.Second }},
		{"deep env over file", file, map[string]string{"EXTAUTHZ_GRPC_KEEPALIVE_TIME": "30s"}, nil,
			func(c Config) (any, any) {
				return c.GRPC.Keepalive, KeepaliveConfig{Time: 30 * time.Second, Timeout: 20 * time.Second, MinTime: 10 * time.Second}
			}},
		{"lease key from file", file, nil, nil, func(c Config) (any, any) { return c.Mapping.RateLimit.LeaseKey, "file_lease" }},
		{"lease key from env", file, map[string]string{"EXTAUTHZ_RATELIMIT_LEASE_KEY": "x_request_id"}, nil,
			func(c Config) (any, any) { return c.Mapping.RateLimit.LeaseKey, "x_request_id" }},
		{"list from env", file, map[string]string{"EXTAUTHZ_STORE_REDIS_ADDRS": "a:1, b:2", "EXTAUTHZ_STORE_REDIS_MODE": "cluster"}, nil,
			func(c Config) (any, any) { return c.Store.Redis.Addrs, []string{"a:1", "b:2"} }},
		{"file keeps siblings of an env override", file, map[string]string{"EXTAUTHZ_STORE_REDIS_ADDRS": "env:6379"}, nil,
			func(c Config) (any, any) { return c.Store.Redis.Timeout, 7 * time.Millisecond }},
		{"int from env", "", map[string]string{"EXTAUTHZ_GRPC_MAX_RECV_MSG_SIZE": "1024"}, nil,
			func(c Config) (any, any) { return c.GRPC.MaxRecvMsgSize, 1024 }},
		{"bool from env", "", map[string]string{"EXTAUTHZ_STORE_REDIS_TLS": "true", "EXTAUTHZ_STORE_REDIS_ADDRS": "r:1"}, nil,
			func(c Config) (any, any) { return c.Store.Redis.TLS, true }},
		{"param names from env", "", map[string]string{"EXTAUTHZ_PARAM_NAMES": "itemId,userId"}, nil,
			func(c Config) (any, any) { return c.ParamNames, []string{"itemId", "userId"} }},
		{"empty env is unset", file, map[string]string{"EXTAUTHZ_GRPC_ADDR": ""}, nil,
			func(c Config) (any, any) { return c.GRPCAddr, "file:1" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(Source{File: tt.file, Getenv: env(tt.vars), Overrides: tt.overrides})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tt.check(cfg); !reflect.DeepEqual(got, want) {
				t.Errorf("got %#v, want %#v", got, want)
			}
		})
	}
}

// Every key can be set from its environment variable: the variable of each scalar key is
// derived from the struct, so none can be forgotten.
func TestEveryKeyFromEnv(t *testing.T) {
	values := map[string]string{ // a valid non-default value per kind of key
		"string":        "",
		"int":           "7",
		"bool":          "true",
		"time.Duration": "42s",
		"float64":       "0.5",
		"[]string":      "a:1",
	}
	for _, k := range Keys() {
		if k.Env == "" {
			if k.Type.Kind() != reflect.Map && k.Type.Kind() != reflect.Slice {
				t.Errorf("%s: scalar key without a variable", k.Name)
			}
			continue
		}
		t.Run(k.Name, func(t *testing.T) {
			val, ok := values[k.Type.String()]
			if !ok {
				t.Fatalf("no test value for type %s", k.Type)
			}
			if val == "" {
				val = "127.0.0.1:7" // valid for the address keys, any string for the others
			}
			if k.Type.Kind() == reflect.Bool { // a switch that is on by default is turned off
				val = strconv.FormatBool(!reflect.ValueOf(Default()).FieldByIndex(k.index).Bool())
			}
			vars := map[string]string{k.Env: val}
			if strings.HasPrefix(k.Name, "store.redis.") && k.Name != "store.redis.addrs" {
				vars["EXTAUTHZ_STORE_REDIS_ADDRS"] = "r:1"
			}
			cfg, _ := Load(Source{Getenv: env(vars)}) // validity is not the point here
			got := reflect.ValueOf(&cfg).Elem().FieldByIndex(k.index)
			def := reflect.ValueOf(Default()).FieldByIndex(k.index)
			if reflect.DeepEqual(got.Interface(), def.Interface()) {
				t.Errorf("%s=%s left %s at its default %v", k.Env, val, k.Name, got)
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
		src          Source
		wantFile     string
		wantOptional bool
	}{
		{"built-in default", Source{}, "rules.yaml", true},
		{"config file without rules_file", Source{File: without}, "rules.yaml", true},
		{"config file", Source{File: withRules}, "r.yaml", false},
		{"env", Source{Getenv: env(map[string]string{"EXTAUTHZ_RULES_FILE": "e.yaml"})}, "e.yaml", false},
		{"override", Source{Overrides: []Override{{Key: "rules_file", Value: "f.yaml"}}}, "f.yaml", false},
		// An explicitly named default file must exist.
		{"override naming the default", Source{Overrides: []Override{{Key: "rules_file", Value: "rules.yaml"}}}, "rules.yaml", false},
		{"override naming none", Source{Overrides: []Override{{Key: "rules_file", Value: ""}}}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RulesFile != tt.wantFile || cfg.RulesOptional != tt.wantOptional {
				t.Errorf("rules %q optional %v, want %q optional %v", cfg.RulesFile, cfg.RulesOptional, tt.wantFile, tt.wantOptional)
			}
		})
	}
}

// Each problem of a config is reported with its key, its value or what is wrong with it, where
// the value came from, and the closest known key or value.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		vars    map[string]string
		want    []string // each line's content, in order
	}{
		{"unknown top-level key", "grpc_adr: \":1\"\n", nil,
			[]string{`grpc_adr: unknown key (did you mean "grpc_addr"?) (from FILE)`}},
		{"unknown nested key", "log: {level: info, colour: true}\n", nil,
			[]string{`log.colour: unknown key (keys of log: level, format) (from FILE)`}},
		{"unknown deep key", "store: {redis: {addrs: [\"a:1\"], pasword: x}}\n", nil,
			[]string{`store.redis.pasword: unknown key (did you mean "store.redis.password"?) (from FILE)`}},
		{"unknown mapping key", "authz: {resource: \"{path}\", orign: []}\n", nil,
			[]string{`authz.orign: unknown key (did you mean "authz.origin"?) (from FILE)`}},
		{"bare integer duration", "shutdown_grace: 15\n", nil,
			[]string{`shutdown_grace: 15 has no unit: write a duration with its unit, like 15s or 15ms (from FILE)`}},
		{"bad duration from env", "", map[string]string{"EXTAUTHZ_SHUTDOWN_GRACE": "15"},
			[]string{`shutdown_grace: "15" is not a duration: write a number with its unit, like 15s, 500ms or 2h (from EXTAUTHZ_SHUTDOWN_GRACE)`}},
		{"wrong type", "grpc: {max_recv_msg_size: lots}\n", nil,
			[]string{`grpc.max_recv_msg_size: want a whole number, got "lots" (from FILE)`}},
		{"not a number from env", "", map[string]string{"EXTAUTHZ_TRACING_SAMPLE_RATIO": "half"},
			[]string{`tracing.sample_ratio: want a number, got "half" (from EXTAUTHZ_TRACING_SAMPLE_RATIO)`}},
		{"section as a value", "log: loud\n", nil,
			[]string{`log: is a section (level, format), not a single value (from FILE)`}},
		{"bad value with suggestion", "log: {level: inf}\n", nil,
			[]string{`log.level: must be debug, info, warn or error, not "inf" (did you mean "info"?) (from FILE)`}},
		{"unknown key in a list of sources", "authz: {origin: [{from: header, name: x}, {frm: header, name: y}]}\n", nil,
			[]string{
				`authz.origin[1].frm: unknown key (did you mean "from"?) (from FILE)`,
				`authz.origin[1].from: missing (one of header, query, cookie, client_ip, host, method, path, principal, context_extension, metadata) (from FILE)`,
			}},
		{"unknown key in a map of sources", "authz: {params: {user: {from: header, name: x-user, spilt: \",\"}}}\n", nil,
			[]string{`authz.params.user.spilt: unknown key (did you mean "split"?) (from FILE)`}},
		{"unknown key far from any", "authz: {params: {user: {from: header, name: x-user, colour: red}}}\n", nil,
			[]string{`authz.params.user.colour: unknown key (keys: from, name, split, namespace, path) (from FILE)`}},
		{"a library's problem names the source of its section", "", map[string]string{
			"EXTAUTHZ_STORE_REDIS_ADDRS": "a:1,nohost", "EXTAUTHZ_STORE_REDIS_MODE": "cluster"},
			[]string{`store.redis.addrs[1]: "nohost" is not host:port (from EXTAUTHZ_STORE_REDIS_ADDRS)`}},
		{"case clash", "authz: {params: {itemId: {from: query, name: a}, itemid: {from: query, name: b}}}\n", nil,
			[]string{`authz.params: "itemId" and "itemid" differ only in case (from FILE)`}},
		{"every problem at once", "grpc_adr: x\nshutdown_grace: 15\nlog: {level: loud}\nstore: {redis: {fallback: retry}}\n",
			map[string]string{"EXTAUTHZ_ADMIN_ADDR": "nohost"},
			[]string{
				`grpc_adr: unknown key (did you mean "grpc_addr"?) (from FILE)`,
				`shutdown_grace: 15 has no unit: write a duration with its unit, like 15s or 15ms (from FILE)`,
				`admin_addr: must be host:port, not "nohost" (from EXTAUTHZ_ADMIN_ADDR)`,
				`log.level: must be debug, info, warn or error, not "loud" (from FILE)`,
				`store.redis.fallback: must be local, allow or deny, not "retry" (from FILE)`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := Source{Getenv: env(tt.vars)}
			if tt.content != "" {
				src.File = writeFile(t, t.TempDir(), "c.yaml", tt.content)
			}
			_, err := Load(src)
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Load = %v, want Errors", err)
			}
			var got []string
			for _, fe := range errs {
				msg := fe.Error()
				if src.File != "" {
					msg = strings.ReplaceAll(msg, src.File, "FILE")
				}
				got = append(got, msg)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestFileErrors(t *testing.T) {
	dir := t.TempDir()
	for name, file := range map[string]string{
		"missing file": filepath.Join(dir, "nope.yaml"),
		"bad yaml":     writeFile(t, dir, "bad.yaml", "grpc_addr: [\n"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(Source{File: file})
			if err == nil || !strings.Contains(err.Error(), "nope.yaml") && !strings.Contains(err.Error(), "bad.yaml") {
				t.Errorf("Load = %v, want an error naming the file", err)
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
	cfg, err := Load(Source{File: file})
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
		RateLimit: descriptors.RateLimitConfig{ResourceKey: "res", OriginKey: "caller", LeaseKey: "lease_id"},
	}
	if !reflect.DeepEqual(cfg.Mapping, want) {
		t.Errorf("mapping\n got %+v\nwant %+v", cfg.Mapping, want)
	}
	if got, want := cfg.ParamNames, []string{"itemId", "client"}; !reflect.DeepEqual(got, want) {
		t.Errorf("param_names = %v, want %v", got, want)
	}
}

func TestUnknownSourceField(t *testing.T) {
	file := writeFile(t, t.TempDir(), "s.yaml", "authz: {params: {item: {from: query, nme: item}}}\n")
	_, err := Load(Source{File: file})
	if err == nil || !strings.Contains(err.Error(), "nme") || !strings.Contains(err.Error(), "authz.params") {
		t.Errorf("Load = %v, want an error naming authz.params and nme", err)
	}
}

// The configs shipped with the project load and validate.
func TestShippedConfigs(t *testing.T) {
	files, _ := filepath.Glob("../../../examples/*.yaml")
	files = append(files, "../../../envoy-config/extauthz.yaml")
	for _, f := range files {
		if strings.Contains(filepath.Base(f), "rules") {
			continue
		}
		t.Run(f, func(t *testing.T) {
			if _, err := Load(Source{File: f}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
