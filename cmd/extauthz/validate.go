package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/rulestore"
)

// validate checks rule files (and the config, when --config is given) and prints every problem
// found, one a line, to stdout. It returns an error when there is at least one.
func validate(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("validate", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("config", "", "config file (YAML): its param_names and store settings apply to the rules")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: extauthz validate [--config FILE] RULES_FILE...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	files := fs.Args()
	if len(files) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: validate needs at least one rules file", errUsage)
	}

	cfg, err := loadConfig(fs, getenv)
	if err != nil {
		return err
	}
	problems := 0
	if err := cfg.Validate(); err != nil {
		var ce ConfigErrors
		if errors.As(err, &ce) {
			for _, fe := range ce {
				fmt.Fprintf(stdout, "config: %s\n", fe)
			}
			problems += len(ce)
		} else {
			return err
		}
	}
	if _, err := descriptors.New(cfg.Mapping); err != nil {
		fmt.Fprintf(stdout, "config: %v\n", err)
		problems++
	}

	opts := rulestore.ParseOptions{ParamNames: cfg.ParamNames, ClusterEnabled: cfg.Store.Redis.Enabled(),
		ClusterFallback: cfg.Store.Redis.Fallback, Mapping: &cfg.Mapping}
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
