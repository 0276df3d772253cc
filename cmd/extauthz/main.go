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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		// After the first signal, a second one kills the process without waiting for the grace.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
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

const usage = `Usage:
  extauthz [serve] [--config FILE] [--rules FILE] [--grpc-addr ADDR] [--admin-addr ADDR]
                   [--log-level LEVEL] [--log-format json|console]
  extauthz validate [--config FILE] RULES_FILE...
  extauthz help

With no command, extauthz serves: gRPC (ext_authz and rate limit) on :9001, admin HTTP on
127.0.0.1:9002, rules from ./rules.yaml when present. Every setting can also come from the
config file and from EXTAUTHZ_* environment variables; flags win over the environment, the
environment over the file.
`

// run runs the command named by args until ctx ends. It writes command output to stdout and
// logs and diagnostics to stderr; getenv reads the environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, getenv, stderr)
	case "validate":
		return validate(args, getenv, stdout, stderr)
	case "help":
		_, err := io.WriteString(stdout, usage)
		return err
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}
