package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/descriptors"
)

// envPrefix starts the name of every environment variable the service reads.
const envPrefix = "EXTAUTHZ_"

// defaultRulesFile is read when present and no rules file is configured.
const defaultRulesFile = "rules.yaml"

// Config is the whole service configuration: embedded defaults, then the config file (YAML),
// then EXTAUTHZ_* environment variables, then flags.
type Config struct {
	GRPCAddr  string `mapstructure:"grpc_addr"`
	AdminAddr string `mapstructure:"admin_addr"`
	// RulesFile is the rules file, watched and reloaded on change; "" means no rules.
	RulesFile     string        `mapstructure:"rules_file"`
	Log           LogConfig     `mapstructure:"log"`
	TLS           TLSConfig     `mapstructure:"tls"`
	GRPC          GRPCConfig    `mapstructure:"grpc"`
	ShutdownGrace time.Duration `mapstructure:"shutdown_grace"`
	// Mapping turns Envoy's requests into resources, origins and params (keys authz, ratelimit).
	Mapping descriptors.Config `mapstructure:",squash"`
	// ParamNames resolves Sentinel's paramIdx in Sentinel-format rule files.
	ParamNames []string    `mapstructure:"param_names"`
	Store      StoreConfig `mapstructure:"store"`

	// rulesOptional is set when RulesFile is the built-in default: a missing file then means
	// an empty rule set rather than an error.
	rulesOptional bool
}

// LogConfig configures logging.
type LogConfig struct {
	Level  string `mapstructure:"level"`  // debug | info | warn | error
	Format string `mapstructure:"format"` // json | console
}

// TLSConfig configures TLS on the gRPC listener; ClientCAFile turns on mTLS.
type TLSConfig struct {
	CertFile     string `mapstructure:"cert_file"`
	KeyFile      string `mapstructure:"key_file"`
	ClientCAFile string `mapstructure:"client_ca_file"`
}

// Enabled reports whether the gRPC listener serves TLS.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// GRPCConfig tunes the gRPC server.
type GRPCConfig struct {
	MaxRecvMsgSize int             `mapstructure:"max_recv_msg_size"` // bytes
	Keepalive      KeepaliveConfig `mapstructure:"keepalive"`
}

// KeepaliveConfig is the server's keepalive pings and its enforcement on clients.
type KeepaliveConfig struct {
	Time    time.Duration `mapstructure:"time"`     // ping a client idle this long; 0 means never
	Timeout time.Duration `mapstructure:"timeout"`  // close a connection whose ping is unanswered this long
	MinTime time.Duration `mapstructure:"min_time"` // shortest ping interval allowed to clients
}

// StoreConfig selects where the state of cluster rules lives; without Redis addresses it is
// in memory.
type StoreConfig struct {
	Redis RedisConfig `mapstructure:"redis"`
}

// RedisConfig is the shared store for `cluster: true` rules.
type RedisConfig struct {
	Addrs    []string `mapstructure:"addrs"`
	Mode     string   `mapstructure:"mode"` // standalone | cluster
	Username string   `mapstructure:"username"`
	Password string   `mapstructure:"password"`
	TLS      bool     `mapstructure:"tls"`
	// CAFile is a PEM file of the authorities that sign Redis's certificate; "" means the system's.
	CAFile   string        `mapstructure:"ca_file"`
	Timeout  time.Duration `mapstructure:"timeout"`  // per call
	Fallback string        `mapstructure:"fallback"` // local | allow | deny, when Redis fails
	// Replicas divides the counts of cluster rules enforced locally while Redis is down.
	Replicas int `mapstructure:"replicas"`
	// Prefix starts every key; "" means the store's default.
	Prefix string `mapstructure:"prefix"`
	// BreakerFailures consecutive failed calls suspend calls to Redis; 0 means the default.
	BreakerFailures int `mapstructure:"breaker_failures"`
	// BreakerCooldown is the time between probes while calls are suspended; 0 means the default.
	BreakerCooldown time.Duration `mapstructure:"breaker_cooldown"`
}

// Enabled reports whether a Redis store is configured.
func (c RedisConfig) Enabled() bool { return len(c.Addrs) > 0 }

// defaults lists every key that can be set from the environment, with its built-in value.
// The Config defaults are decoded from it, so the two cannot drift apart.
func defaults() map[string]any {
	return map[string]any{
		"grpc_addr":                    ":9001",
		"admin_addr":                   "127.0.0.1:9002",
		"rules_file":                   "",
		"log.level":                    "info",
		"log.format":                   "json",
		"tls.cert_file":                "",
		"tls.key_file":                 "",
		"tls.client_ca_file":           "",
		"grpc.max_recv_msg_size":       4 << 20,
		"grpc.keepalive.time":          "2h",
		"grpc.keepalive.timeout":       "20s",
		"grpc.keepalive.min_time":      "10s",
		"shutdown_grace":               "15s",
		"authz.resource":               descriptors.DefaultResource,
		"authz.trusted_hops":           0,
		"ratelimit.resource_key":       "resource",
		"ratelimit.origin_key":         "origin",
		"param_names":                  []string{},
		"store.redis.addrs":            []string{},
		"store.redis.mode":             "standalone",
		"store.redis.username":         "",
		"store.redis.password":         "",
		"store.redis.tls":              false,
		"store.redis.timeout":          "5ms",
		"store.redis.fallback":         "local",
		"store.redis.replicas":         1,
		"store.redis.ca_file":          "",
		"store.redis.prefix":           "",
		"store.redis.breaker_failures": 0,
		"store.redis.breaker_cooldown": "0s",
	}
}

// envName is the environment variable for key: "grpc.keepalive.time" is
// EXTAUTHZ_GRPC_KEEPALIVE_TIME.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// flagKey is the config key a flag sets, or "" for a flag that sets none.
func flagKey(flag string) string {
	switch flag {
	case "rules":
		return "rules_file"
	case "grpc-addr":
		return "grpc_addr"
	case "admin-addr":
		return "admin_addr"
	case "log-level":
		return "log.level"
	case "log-format":
		return "log.format"
	}
	return ""
}

// addConfigFlags declares the flags of the serve command on fs.
func addConfigFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "config file (YAML)")
	fs.String("rules", "", "rules file, watched and reloaded on change (default ./"+defaultRulesFile+" when present)")
	fs.String("grpc-addr", "", "gRPC listen address (default :9001)")
	fs.String("admin-addr", "", "admin HTTP listen address (default 127.0.0.1:9002)")
	fs.String("log-level", "", "log level: debug, info, warn, error (default info)")
	fs.String("log-format", "", "log format: json, console (default json)")
}

// loadConfig builds the Config: defaults, then the file named by --config (if any), then the
// environment, then the flags of fs that were set. Unknown keys in the file are an error.
func loadConfig(fs *pflag.FlagSet, getenv func(string) string) (Config, error) {
	v := viper.New()
	defs := defaults()
	keys := make([]string, 0, len(defs))
	for k, val := range defs {
		v.SetDefault(k, val)
		keys = append(keys, k)
	}
	sort.Strings(keys)

	file, _ := fs.GetString("config")
	var raw []byte
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return Config{}, fmt.Errorf("cannot read config: %w", err)
		}
		raw = data
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", file, err)
		}
	}

	rulesSet := file != "" && v.InConfig("rules_file")
	for _, k := range keys {
		if val := getenv(envName(k)); val != "" {
			v.Set(k, val)
			rulesSet = rulesSet || k == "rules_file"
		}
	}
	fs.Visit(func(f *pflag.Flag) {
		if key := flagKey(f.Name); key != "" {
			v.Set(key, f.Value.String())
			rulesSet = rulesSet || key == "rules_file"
		}
	})

	var cfg Config
	err := v.UnmarshalExact(&cfg, func(dc *mapstructure.DecoderConfig) {
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			splitHook,
		)
	})
	if err != nil {
		src := "config"
		if file != "" {
			src = "config " + file
		}
		return Config{}, fmt.Errorf("%s: %s", src, decodeMessage(err))
	}
	if raw != nil {
		if err := restoreParamCase(&cfg, raw); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", file, err)
		}
	}
	if !rulesSet && cfg.RulesFile == "" {
		cfg.RulesFile = defaultRulesFile
		cfg.rulesOptional = true
	}
	return cfg, nil
}

// decodeMessage puts the decoder's multi-line error on one line: "'log' has invalid keys:
// colour; 'grpc.max_recv_msg_size' cannot parse ...".
func decodeMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "decoding failed due to the following error(s):")
	var parts []string
	for _, line := range strings.Split(msg, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, "; ")
}

// splitHook turns a comma-separated string (an environment variable) into a list.
func splitHook(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || to.Kind() != reflect.Slice {
		return data, nil
	}
	if s == "" {
		return []string{}, nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts, nil
}

// restoreParamCase gives the names under authz.params back the case they have in the file:
// the config reader folds keys to lower case, but param names are matched against rules
// exactly.
func restoreParamCase(cfg *Config, raw []byte) error {
	var doc struct {
		Authz struct {
			Params map[string]any `json:"params"`
		} `json:"authz"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return err
	}
	if len(doc.Authz.Params) == 0 || len(cfg.Mapping.Authz.Params) == 0 {
		return nil
	}
	original := make(map[string]string, len(doc.Authz.Params))
	for name := range doc.Authz.Params {
		lower := strings.ToLower(name)
		if other, dup := original[lower]; dup {
			a, b := other, name
			if a > b {
				a, b = b, a
			}
			return fmt.Errorf("authz.params: %q and %q differ only in case", a, b)
		}
		original[lower] = name
	}
	params := make(map[string]descriptors.Source, len(cfg.Mapping.Authz.Params))
	for name, src := range cfg.Mapping.Authz.Params {
		if orig, ok := original[name]; ok {
			name = orig
		}
		params[name] = src
	}
	cfg.Mapping.Authz.Params = params
	return nil
}

// FieldError is one invalid config setting.
type FieldError struct {
	Field  string // the key, as in the file: "store.redis.mode"
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// ConfigErrors is every invalid setting of a Config.
type ConfigErrors []*FieldError

func (e ConfigErrors) Error() string {
	msgs := make([]string, len(e))
	for i, fe := range e {
		msgs[i] = fe.Error()
	}
	return "invalid config: " + strings.Join(msgs, "; ")
}

// Validate checks every setting and returns ConfigErrors naming each bad one, or nil.
func (c *Config) Validate() error {
	var errs ConfigErrors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	checkAddr := func(field, addr string) {
		if addr == "" {
			add(field, "must not be empty")
			return
		}
		if _, port, err := net.SplitHostPort(addr); err != nil {
			add(field, "must be host:port: %v", err)
		} else if port == "" {
			add(field, "missing port")
		}
	}
	checkAddr("grpc_addr", c.GRPCAddr)
	checkAddr("admin_addr", c.AdminAddr)

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level", "must be debug, info, warn or error, not %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		add("log.format", "must be json or console, not %q", c.Log.Format)
	}

	if c.TLS.Enabled() {
		if c.TLS.CertFile == "" {
			add("tls.cert_file", "required with tls.key_file")
		}
		if c.TLS.KeyFile == "" {
			add("tls.key_file", "required with tls.cert_file")
		}
	} else if c.TLS.ClientCAFile != "" {
		add("tls.client_ca_file", "requires tls.cert_file and tls.key_file")
	}

	if c.GRPC.MaxRecvMsgSize <= 0 {
		add("grpc.max_recv_msg_size", "must be > 0 bytes, not %d", c.GRPC.MaxRecvMsgSize)
	}
	if c.GRPC.Keepalive.Time < 0 {
		add("grpc.keepalive.time", "must not be negative")
	}
	if c.GRPC.Keepalive.Timeout <= 0 {
		add("grpc.keepalive.timeout", "must be > 0")
	}
	if c.GRPC.Keepalive.MinTime < 0 {
		add("grpc.keepalive.min_time", "must not be negative")
	}
	if c.ShutdownGrace <= 0 {
		add("shutdown_grace", "must be > 0")
	}

	for i, name := range c.ParamNames {
		if strings.TrimSpace(name) == "" {
			add(fmt.Sprintf("param_names[%d]", i), "must not be empty")
		}
	}

	r := c.Store.Redis
	switch r.Mode {
	case "standalone", "cluster":
	default:
		add("store.redis.mode", "must be standalone or cluster, not %q", r.Mode)
	}
	if r.Mode == "standalone" && len(r.Addrs) > 1 {
		add("store.redis.addrs", "standalone mode takes one address, not %d", len(r.Addrs))
	}
	for i, a := range r.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			add(fmt.Sprintf("store.redis.addrs[%d]", i), "must be host:port: %v", err)
		}
	}
	if r.Timeout <= 0 {
		add("store.redis.timeout", "must be > 0")
	}
	switch r.Fallback {
	case "local", "allow", "deny":
	default:
		add("store.redis.fallback", "must be local, allow or deny, not %q", r.Fallback)
	}
	if r.Replicas < 0 {
		add("store.redis.replicas", "must not be negative")
	}
	if strings.ContainsAny(r.Prefix, "{}") {
		add("store.redis.prefix", "must not contain a brace")
	}
	if r.CAFile != "" && !r.TLS {
		add("store.redis.ca_file", "requires store.redis.tls")
	}
	if r.BreakerFailures < 0 {
		add("store.redis.breaker_failures", "must not be negative")
	}
	if r.BreakerCooldown < 0 {
		add("store.redis.breaker_cooldown", "must not be negative")
	}
	if !r.Enabled() && (r.Username != "" || r.Password != "") {
		add("store.redis.addrs", "required when store.redis credentials are set")
	}

	if len(errs) == 0 {
		return nil
	}
	return errs
}
