package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/extauthz/extauthz/internal/closest"
)

// flagError words a command-line flag cmd cannot parse: an unknown long flag gets the closest
// flag of cmd, as a mistyped config key gets the closest key ("unknown flag: --rule (did you
// mean "--rules"?)"). Any other error is returned as it is.
func flagError(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedShortnames() != "" {
		return err
	}
	var names []string
	collect := func(f *pflag.Flag) { names = append(names, f.Name) }
	cmd.Flags().VisitAll(collect)
	cmd.InheritedFlags().VisitAll(collect)
	if name, ok := closest.Name(ne.GetSpecifiedName(), names); ok {
		return fmt.Errorf("%w (did you mean %q?)", err, "--"+name)
	}
	return err
}
