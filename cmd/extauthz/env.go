package main

import (
	"strings"

	"go.uber.org/zap"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
)

// lookupEnv reads one variable of environ (KEY=value); "" when unset. Of a name given twice,
// the last counts.
func lookupEnv(environ []string) func(string) string {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	return func(name string) string { return vars[name] }
}

// warnIgnoredEnv warns of the EXTAUTHZ_* variables of environ that the service does not read
// and that are no mistake config.CheckEnv refuses: named like no key and under no section.
func warnIgnoredEnv(log *zap.Logger, environ []string) {
	if _, ignored := config.CheckEnv(environ); len(ignored) > 0 {
		log.Warn("environment variables named "+config.EnvPrefix+"* that no setting has are ignored",
			zap.Strings("variables", ignored))
	}
}
