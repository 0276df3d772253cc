package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/spf13/pflag"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
)

// env is a fake environment, as os.Environ lists it.
func env(vars map[string]string) []string {
	environ := []string{}
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	return environ
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
func load(t *testing.T, args []string, vars map[string]string) (config.Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	addConfigFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return config.Load(configSource(fs, env(vars)))
}

// Flags win over the environment and the file; each flag sets its key.
func TestFlags(t *testing.T) {
	file := writeFile(t, t.TempDir(), "extauthz.yaml", "grpc_addr: \"file:1\"\nlog: {level: warn}\n")
	tests := []struct {
		name  string
		args  []string
		vars  map[string]string
		check func(c config.Config) (got, want any)
	}{
		{"flag over env", []string{"--config", file, "--grpc-addr", "flag:1"}, map[string]string{"EXTAUTHZ_GRPC_ADDR": "env:1"},
			func(c config.Config) (any, any) { return c.GRPCAddr, "flag:1" }},
		{"flag over file", []string{"--config", file, "--admin-addr=flag:2"}, nil,
			func(c config.Config) (any, any) { return c.AdminAddr, "flag:2" }},
		{"nested flag over env", []string{"--config", file, "--log-level", "error"}, map[string]string{"EXTAUTHZ_LOG_LEVEL": "debug"},
			func(c config.Config) (any, any) { return c.Log.Level, "error" }},
		{"log format", []string{"--log-format", "console"}, nil,
			func(c config.Config) (any, any) { return c.Log.Format, "console" }},
		{"rules flag", []string{"--config", file, "--rules", "flag-rules.yaml"}, map[string]string{"EXTAUTHZ_RULES_FILE": "env-rules.yaml"},
			func(c config.Config) (any, any) {
				return []any{c.RulesFile, c.RulesOptional}, []any{"flag-rules.yaml", false}
			}},
		{"empty rules flag", []string{"--rules", ""}, nil,
			func(c config.Config) (any, any) { return []any{c.RulesFile, c.RulesOptional}, []any{"", false} }},
		{"no flags", nil, nil,
			func(c config.Config) (any, any) {
				return []any{c.RulesFile, c.RulesOptional}, []any{"rules.yaml", true}
			}},
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

// A bad flag value is reported under its key, naming the flag.
func TestFlagErrorNamesFlag(t *testing.T) {
	_, err := load(t, []string{"--log-level", "loud"}, nil)
	if err == nil || err.Error() != `invalid config: log.level: must be debug, info, warn or error, not "loud" (from --log-level)` {
		t.Errorf("err = %v", err)
	}
}
