package main

import (
	"github.com/spf13/pflag"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
)

// ConfigErrors is every invalid setting of a config.
type ConfigErrors = config.Errors

// configFlag is a flag that sets a config key.
type configFlag struct{ flag, key, usage string }

// configFlags are the flags that set a config key.
func configFlags() []configFlag {
	return []configFlag{
		{"rules", "rules_file", "rules file, watched and reloaded on change (default ./" + config.DefaultRulesFile + " when present)"},
		{"grpc-addr", "grpc_addr", "gRPC listen address (default :9001)"},
		{"admin-addr", "admin_addr", "admin HTTP listen address (default 127.0.0.1:9002)"},
		{"log-level", "log.level", "log level: debug, info, warn, error (default info)"},
		{"log-format", "log.format", "log format: json, console (default json)"},
	}
}

// addConfigFlags declares the flags of the serve command on fs.
func addConfigFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "config file (YAML)")
	for _, f := range configFlags() {
		fs.String(f.flag, "", f.usage)
	}
}

// configSource is where the settings come from: the file named by --config (if any), the
// environment (whose misspelt or unknown EXTAUTHZ_* variables are errors: config.CheckEnv),
// then the flags of fs that were set.
func configSource(fs *pflag.FlagSet, environ []string) config.Source {
	src := config.Source{Getenv: lookupEnv(environ), Environ: environ}
	src.File, _ = fs.GetString("config")
	for _, f := range configFlags() {
		if fl := fs.Lookup(f.flag); fl != nil && fl.Changed {
			src.Overrides = append(src.Overrides, config.Override{Key: f.key, Value: fl.Value.String(), From: "--" + f.flag})
		}
	}
	return src
}

// loadConfig reads the config from configSource without validating it.
func loadConfig(fs *pflag.FlagSet, environ []string) (config.Config, error) {
	return config.Parse(configSource(fs, environ))
}
