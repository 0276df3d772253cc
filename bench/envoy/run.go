package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// benchRules let every benchmark request through both paths: GET /items has an authority rule
// that origin web passes (a black list, so that a rate-limit call passes it too where the
// bootstrap gives the rate-limit filter the origin only from ext_authz's metadata) and a
// bucket per item_id that no run empties.
const benchRules = `authority:
  - {resource: "GET:/items", strategy: black, origins: [scraper]}
param_flow:
  - {resource: "GET:/items", param: item_id, grade: qps, count: 1000000000, duration: 1s}
`

// ratelimitConfig is the same limit for envoyproxy/ratelimit, over the descriptors envoy.yaml's
// /items route sends, with the origin or without it.
const ratelimitConfig = `domain: extauthz
descriptors:
  - key: resource
    value: "GET:/items"
    descriptors:
      - key: origin
        value: web
        descriptors:
          - key: item_id
            rate_limit: {unit: second, requests_per_unit: 1000000000}
      - key: item_id
        rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// benchValues is how many item_id values the requests cycle through.
const benchValues = 1024

type runFlags struct {
	root, extauthz, ratelimit, redis, envoy, h2load, only string
	rounds, clients, rate, workers                        int
	dur                                                   time.Duration
}

func runCmd(args []string) error {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.StringVar(&f.root, "root", ".", "the repository (for envoy-config/)")
	fs.StringVar(&f.extauthz, "extauthz", "", "the extauthz binary (required)")
	fs.StringVar(&f.ratelimit, "ratelimit", "", "an envoyproxy/ratelimit binary; empty skips rl-ratelimit")
	fs.StringVar(&f.redis, "redis-server", "redis-server", "redis-server, for envoyproxy/ratelimit")
	fs.StringVar(&f.envoy, "envoy", "envoy", "the Envoy binary")
	fs.StringVar(&f.h2load, "h2load", "h2load", "the h2load binary")
	fs.StringVar(&f.only, "only", "", "comma-separated variants to run (default all)")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds; each runs every variant once, the order rotated")
	fs.IntVar(&f.clients, "clients", 20, "h2load connections")
	fs.IntVar(&f.rate, "rate", 100, "requests a second per connection")
	fs.IntVar(&f.workers, "workers", 2, "Envoy worker threads")
	fs.DurationVar(&f.dur, "duration", 10*time.Second, "measured time of a run (whole seconds)")
	_ = fs.Parse(args)
	if f.extauthz == "" {
		return fmt.Errorf("-extauthz is required")
	}
	dir, err := os.MkdirTemp("", "envoybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{flags: f, dir: dir, svcs: map[string]*service{}}
	defer b.stop()
	if err := b.setUp(); err != nil {
		return err
	}
	return b.measure()
}

// service is what serves an Envoy's extauthz cluster: its address and the processes whose
// CPU counts as its own.
type service struct {
	addr  string
	procs []*proc
}

type bench struct {
	flags  runFlags
	dir    string
	svcs   map[string]*service
	envoys map[string]*envoyProc
	run    []variant
	others []*proc
}

func (b *bench) stop() {
	for _, e := range b.envoys {
		e.stop()
	}
	for _, s := range b.svcs {
		for _, p := range s.procs {
			p.stop()
		}
	}
	for _, p := range b.others {
		p.stop()
	}
}

// setUp starts the upstream, the services and one Envoy per variant.
func (b *bench) setUp() error {
	up, err := startUpstream()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := b.startNoop("noop", self); err != nil {
		return err
	}

	// The rules file lives in a directory of its own, as in a deployment: extauthz watches
	// its directory, and each write there (Envoy's access log, in b.dir) wakes the watcher.
	rules := filepath.Join(b.dir, "rules", "rules.yaml")
	if err := os.Mkdir(filepath.Dir(rules), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(rules, []byte(benchRules), 0o644); err != nil {
		return err
	}
	var extAddr string
	ext, err := start(b.dir, "extauthz", func(line string) bool {
		extAddr = servingAddr(line)
		return extAddr != ""
	}, nil, b.flags.extauthz, "serve", "--config", filepath.Join(b.flags.root, "envoy-config", "extauthz.yaml"),
		"--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b.svcs["extauthz"] = &service{addr: extAddr, procs: []*proc{ext}}

	// The mirror: a no-op that answers with extauthz's answers (asked once a method).
	if err := b.startNoop("mirror", self, "-like", extAddr); err != nil {
		return err
	}

	if b.flags.ratelimit != "" {
		if err := b.startRatelimit(); err != nil {
			return err
		}
	}
	src, err := os.ReadFile(filepath.Join(b.flags.root, "envoy-config", "envoy.yaml"))
	if err != nil {
		return err
	}
	b.envoys = map[string]*envoyProc{}
	for _, v := range variants {
		if !b.wanted(v) {
			continue
		}
		cfg, err := v.bootstrap(src, b.svcs[v.service].addr, up)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		e, err := startEnvoy(b.dir, "envoy-"+v.name, b.flags.envoy, cfg, b.flags.workers)
		if err != nil {
			return err
		}
		b.envoys[v.name] = e
		b.run = append(b.run, v)
		var sb strings.Builder
		for i := range benchValues {
			fmt.Fprintf(&sb, "http://%s/items?item_id=%d\n", e.ingress, i)
		}
		if err := os.WriteFile(b.uris(v), []byte(sb.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startNoop starts this binary's no-op (with args, the mirror) as the service name.
func (b *bench) startNoop(name, self string, args ...string) error {
	var addr string
	p, err := start(b.dir, name, func(line string) bool {
		if _, _, err := net.SplitHostPort(line); err == nil {
			addr = line
			return true
		}
		return false
	}, nil, self, append([]string{"noop"}, args...)...)
	if err != nil {
		return err
	}
	b.svcs[name] = &service{addr: addr, procs: []*proc{p}}
	return nil
}

func (b *bench) uris(v variant) string { return filepath.Join(b.dir, v.name+".uris") }

func (b *bench) wanted(v variant) bool {
	if v.service == "ratelimit" && b.flags.ratelimit == "" {
		return false
	}
	if b.flags.only == "" {
		return true
	}
	for _, n := range strings.Split(b.flags.only, ",") {
		if strings.TrimSpace(n) == v.name {
			return true
		}
	}
	return false
}

// startRatelimit starts a redis-server and envoyproxy/ratelimit on it, with the same limit.
func (b *bench) startRatelimit() error {
	rport, err := freePort()
	if err != nil {
		return err
	}
	redis, err := start(b.dir, "redis", nil, nil, b.flags.redis, "--port", strconv.Itoa(rport), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err != nil {
		return err
	}
	b.others = append(b.others, redis)
	if err := waitPort(fmt.Sprintf("127.0.0.1:%d", rport), 10*time.Second); err != nil {
		return err
	}
	cfgDir := filepath.Join(b.dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(ratelimitConfig), 0o644); err != nil {
		return err
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	env := []string{"USE_STATSD=false", "LOG_LEVEL=error", "REDIS_SOCKET_TYPE=tcp",
		fmt.Sprintf("REDIS_URL=127.0.0.1:%d", rport), "RUNTIME_ROOT=" + filepath.Join(b.dir, "runtime"),
		"RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "GRPC_HOST=127.0.0.1",
		fmt.Sprintf("GRPC_PORT=%d", ports[0]), "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", ports[1]),
		"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", ports[2])}
	rl, err := start(b.dir, "ratelimit", nil, env, b.flags.ratelimit)
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	if err := waitPort(addr, 30*time.Second); err != nil {
		rl.stop()
		log, _ := os.ReadFile(rl.log)
		return fmt.Errorf("ratelimit: %v\n%s", err, tail(log, 4000))
	}
	// Its CPU and its Redis's count as the service's.
	b.svcs["ratelimit"] = &service{addr: addr, procs: []*proc{rl, redis}}
	return nil
}

// startUpstream serves the upstream cluster in this process: 200 and a short body.
func startUpstream() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	body := []byte("ok\n")
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("content-type", "text/plain")
			_, _ = w.Write(body)
		}))
	}()
	return l.Addr().String(), nil
}

// measure runs every variant once a round, the order rotated by one each round, and prints
// each run, then the summary.
func (b *bench) measure() error {
	l := load{h2load: b.flags.h2load, clients: b.flags.clients, rate: b.flags.rate, dur: b.flags.dur,
		headers: []string{"x-origin: web"}}
	fmt.Printf("# %d connections x %d req/s (%d req/s offered), %s a run after 1s of warm-up, Envoy --concurrency %d, %d rounds\n",
		l.clients, l.rate, l.clients*l.rate, l.dur, b.flags.workers, b.flags.rounds)
	fmt.Printf("%-5s %-16s %9s %9s %9s %12s %12s %12s %7s\n", "round", "variant", "req/s", "p50", "p99",
		"envoy-us/req", "svc-us/req", "total-us/req", "failed")
	results := map[string][]result{}
	for r := range b.flags.rounds {
		n := len(b.run)
		for i := range n {
			v := b.run[(i+r)%n]
			var pids []int
			if v.filters != nil {
				for _, p := range b.svcs[v.service].procs {
					pids = append(pids, p.pid())
				}
			}
			res, err := l.run(b.dir, b.uris(v), b.envoys[v.name].pid(), pids)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			if res.failed*100 > res.requests+res.failed {
				return fmt.Errorf("%s: %d of %d requests got no 2xx: the variant does not let the benchmark's requests through",
					v.name, res.failed, res.requests+res.failed)
			}
			results[v.name] = append(results[v.name], res)
			fmt.Printf("%-5d %-16s %9.0f %9s %9s %12.1f %12.1f %12.1f %7d\n", r+1, v.name, res.rps,
				res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond),
				res.perRequest(res.envoyCPU), res.perRequest(res.svcCPU), res.perRequest(res.envoyCPU+res.svcCPU), res.failed)
		}
	}
	report(os.Stdout, b.run, results)
	return nil
}
