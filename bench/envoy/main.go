// Command envoybench runs the shipped Envoy bootstrap (envoy-config/envoy.yaml, rewritten to
// loopback) in a real Envoy, once per variant of its HTTP filters, all side by side: no auth
// filter; ext_authz to a no-op gRPC server and to extauthz; the rate-limit filter to the no-op,
// to extauthz and (given its binary) to envoyproxy/ratelimit; Envoy's own local_ratelimit.
// h2load sends the same open-loop load through each in turn, the order rotated every round,
// and the command reports requests a second, p50/p99 and the CPU per request of Envoy and of
// the service behind it (from /proc), and what extauthz adds to Envoy against what the no-op
// adds. run.sh beside it builds and runs it.
//
//	envoybench run -extauthz BIN [-ratelimit BIN] [flags]
//	envoybench bootstrap -variant NAME -service ADDR -upstream ADDR   (prints the bootstrap)
//	envoybench noop -addr ADDR [-like ADDR]                            (the no-op service, or the mirror)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: envoybench run|bootstrap|noop [flags]")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "run":
		err = runCmd(args)
	case "bootstrap":
		err = bootstrapCmd(args)
	case "noop":
		fs := flag.NewFlagSet("noop", flag.ExitOnError)
		addr := fs.String("addr", "127.0.0.1:0", "address to serve on")
		like := fs.String("like", "", "extauthz's address: answer every call with the answer it gave the first (the mirror)")
		pace := fs.Int("pace", 0, "answer ShouldRateLimit at most this many calls a second, each held until its turn (the paced no-op: a throttle and nothing else); 0: at once")
		_ = fs.Parse(args)
		err = serveNoop(*addr, *like, *pace)
	default:
		err = fmt.Errorf("unknown command %q: want run, bootstrap or noop", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "envoybench:", err)
		os.Exit(1)
	}
}

// bootstrapCmd prints the bootstrap a variant runs.
func bootstrapCmd(args []string) error {
	fs := flag.NewFlagSet("bootstrap", flag.ExitOnError)
	src := fs.String("src", filepath.Join("envoy-config", "envoy.yaml"), "the shipped bootstrap")
	name := fs.String("variant", "none", "which filters: "+variantNames())
	service := fs.String("service", "127.0.0.1:9001", "address of the extauthz cluster")
	upstream := fs.String("upstream", "127.0.0.1:8080", "address of the upstream cluster")
	_ = fs.Parse(args)
	v, err := findVariant(*name)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(*src)
	if err != nil {
		return err
	}
	out, err := v.bootstrap(b, *service, *upstream)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(out, '\n'))
	return err
}

func variantNames() string {
	s := ""
	for i, v := range variants {
		if i > 0 {
			s += ", "
		}
		s += v.name
	}
	return s
}
