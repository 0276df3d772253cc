// Command extauthz is the authorization and rate-limit service Envoy calls: ext_authz Check and
// rate-limit ShouldRateLimit, enforcing authority and hot-parameter rules.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	// SIGHUP never ends the process: while it serves, serve reloads on it; before and after, it
	// is dropped here.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		// After the first signal, a second one kills the process without waiting for the grace.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "extauthz:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errUsage marks an error in how the command was called.
var errUsage = errors.New("usage")

// usageError is a mistake in the command line: an unknown command or flag, a wrong number of
// arguments. It wraps errUsage and reads as cobra's own message.
type usageError struct{ err error }

func (e *usageError) Error() string   { return strings.TrimSpace(e.err.Error()) }
func (e *usageError) Unwrap() []error { return []error{errUsage, e.err} }

const synopsis = `  extauthz [serve] [--config FILE] [--rules FILE] [--grpc-addr ADDR] [--admin-addr ADDR]
                   [--log-level LEVEL] [--log-format json|console]
  extauthz validate [--config FILE] RULES_FILE...
  extauthz version
  extauthz completion bash|zsh|fish
  extauthz help [COMMAND]`

// run runs the command named by args until ctx ends. It writes command output to stdout and
// logs and diagnostics to stderr; environ is the environment (KEY=value, as os.Environ). With
// no command (no argument, or a flag first), it serves: `extauthz --rules r.yaml` is
// `extauthz serve --rules r.yaml`.
func run(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && args[0] != "-h" && args[0] != "--help") {
		args = append([]string{"serve"}, args...)
	}
	// started is set once a command's own code runs; an error before that is cobra's, about
	// the command line.
	started := false
	root := newRootCommand(environ, &started)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil || started {
		return err
	}
	fmt.Fprint(stderr, cmd.UsageString())
	return &usageError{err}
}

// newRootCommand is the extauthz command and its subcommands. Each subcommand sets *started
// when its own code begins.
func newRootCommand(environ []string, started *bool) *cobra.Command {
	root := &cobra.Command{
		Use:   "extauthz",
		Short: "Authorization and rate-limit service for Envoy",
		Long: `extauthz is the service Envoy calls (ext_authz Check and the rate-limit service's
ShouldRateLimit, over gRPC) to enforce authority white/black lists and hot-parameter limits.

Commands:
` + synopsis + `

With no command, extauthz serves: gRPC (ext_authz and rate limit) on :9001, admin HTTP on
127.0.0.1:9002, rules from ./rules.yaml when present. Every setting can also come from the
config file and from EXTAUTHZ_* environment variables; flags win over the environment, the
environment over the file.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// A mistyped command gets the closest one: "serv" suggests "serve".
		SuggestionsMinimumDistance: 2,
	}
	root.SetHelpCommand(helpCommand(root))
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(
		serveCommand(environ, started),
		validateCommand(environ, started),
		versionCommand(started),
	)
	return root
}

// helpCommand prints the help of root or of the command its arguments name. Unlike cobra's own,
// an unknown command is a usage error, with the closest command.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				return fmt.Errorf("unknown command %q for %q", rest[0], target.CommandPath())
			}
			return target.Help()
		},
	}
}

// serveCommand runs the service until the context ends.
func serveCommand(environ []string, started *bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve ext_authz and rate-limit calls (the default command)",
		Long: `Serve runs the service until SIGTERM or SIGINT: gRPC (ext_authz Check and
ShouldRateLimit, health, reflection) on grpc_addr and the admin HTTP listener on admin_addr.
The rules file is watched and reloaded when it changes; SIGHUP reloads the rules (from the file
or etcd) and the TLS certificate at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			*started = true
			return serve(cmd.Context(), cmd.Flags(), environ, cmd.ErrOrStderr())
		},
	}
	addConfigFlags(cmd.Flags())
	return cmd
}

// validateCommand checks rules files and, with --config, the config.
func validateCommand(environ []string, started *bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validate [--config FILE] RULES_FILE...",
		Short: "Check rules files (and a config) and print every problem",
		Long: `Validate checks each rules file as the service would load it, and the config when
--config is given (its param_names and store settings apply to the rules). Every problem is
printed, one a line, with its file, rule and field; the command exits 1 when there is one.`,
		Args: func(_ *cobra.Command, files []string) error {
			if len(files) == 0 {
				return errors.New("validate needs at least one rules file")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, files []string) error {
			*started = true
			return validate(cmd.Flags(), files, environ, cmd.OutOrStdout())
		},
	}
	cmd.Flags().String("config", "", "config file (YAML): its param_names and store settings apply to the rules")
	return cmd
}
