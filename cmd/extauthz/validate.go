package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/extauthz/extauthz/internal/config"
	"github.com/extauthz/extauthz/rulestore"
)

// validate checks rule files (and the config, when --config is set in the parsed flags fs) and
// prints every problem found, one a line, to stdout. It returns an error when there is at least
// one.
func validate(fs *pflag.FlagSet, files []string, getenv func(string) string, stdout io.Writer) error {
	// Every problem of the config at once, as serve would find them (the mapping's among
	// them), each with where its value came from; the rules are then checked with the
	// settings that did load.
	cfg, err := config.Load(configSource(fs, getenv))
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

	opts := rulestore.ParseOptions{ParamNames: cfg.ParamNames, ClusterEnabled: cfg.Store.Redis.Enabled()}
	for _, file := range files {
		rules, err := rulestore.Load(file, opts)
		if err == nil {
			for _, w := range rules.Warnings {
				fmt.Fprintf(stdout, "warning: %s\n", w)
			}
			fmt.Fprintf(stdout, "%s: ok: %d authority rules, %d param_flow rules\n",
				file, len(rules.Authority), len(rules.ParamFlow))
			continue
		}
		var verrs rulestore.Errors
		if errors.As(err, &verrs) {
			for _, ve := range verrs {
				fmt.Fprintln(stdout, ve.Error())
			}
			problems += len(verrs)
			continue
		}
		// Not a validation error (a file that cannot be read): name the file unless the
		// error already does.
		fmt.Fprintln(stdout, withFile(file, err))
		problems++
	}
	if problems > 0 {
		return fmt.Errorf("%d problem(s) found", problems)
	}
	return nil
}

// withFile prefixes err with file unless its message already starts with it.
func withFile(file string, err error) string {
	msg := err.Error()
	if len(msg) >= len(file) && msg[:len(file)] == file {
		return msg
	}
	return file + ": " + msg
}
