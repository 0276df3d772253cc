package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/rulestore"
)

// validate checks rule files (and the config, when --config is set in the parsed flags fs) and
// prints every problem found, one a line, to stdout. It returns an error when there is at least
// one.
func validate(fs *pflag.FlagSet, files []string, environ []string, stdout io.Writer) error {
	// Every problem of the config at once, as serve would find them (the mapping's among
	// them), each with where its value came from; the rules are then checked with the
	// settings that did load.
	cfg, err := config.Load(configSource(fs, environ))
	problems := 0
	if err != nil {
		var ce ConfigErrors
		if !errors.As(err, &ce) {
			return err // the file cannot be read or is not YAML
		}
		for _, fe := range ce {
			fmt.Fprintf(stdout, "config: %s\n", fe)
		}
		problems += len(ce)
	}

	opts := rulestore.ParseOptions{ParamNames: cfg.ParamNames, ClusterEnabled: cfg.Store.Redis.Enabled(),
		ClusterFallback: cfg.Store.Redis.Fallback, ClusterClients: cfg.Store.Redis.Replicas, Mapping: &cfg.Mapping}
	for _, file := range files {
		lines, n := rulestore.Report(file, opts)
		for _, l := range lines {
			fmt.Fprintln(stdout, l)
		}
		problems += n
	}
	if problems > 0 {
		return fmt.Errorf("%d problem(s) found", problems)
	}
	return nil
}
