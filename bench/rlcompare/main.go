// Command rlcompare drives a rate-limit service (Envoy's RateLimitService over gRPC) with many
// clients asking for one hot value, and reports its throughput and what Redis spent per check
// (INFO cpu and commandstats read before and after). run.sh runs it against extauthz in Redis
// mode and against envoyproxy/ratelimit on the same redis-server, side by side.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "gRPC address of the rate-limit service")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "the redis-server both services use")
	clients := flag.Int("clients", 50, "concurrent clients")
	conns := flag.Int("conns", 4, "gRPC connections the clients share")
	dur := flag.Duration("duration", 10*time.Second, "how long to run, after a warm-up of a second")
	value := flag.String("value", "hot", "the item_id every request asks for")
	values := flag.Int("values", 1, "how many item_ids the requests ask for, in turn: -value itself when 1, else -value with -0, -1, ... appended")
	name := flag.String("name", "service", "label of the result line")
	pid := flag.Int("pid", 0, "process id of the service, to report its CPU per check (0: not reported)")
	load := flag.String("load", "h2", "load generator: h2 (pre-encoded HTTP/2 frames) or grpc (grpc-go's client)")
	windows := flag.String("grpc-windows", "dynamic", "grpc-go's flow-control windows with -load grpc: dynamic (grpc-go's default) or static (1 MiB, no BDP pings: Envoy's windows are set in its HTTP/2 options)")
	flag.Parse()

	if *values < 1 {
		log.Fatalf("-values %d: want 1 or more", *values)
	}
	var reqs []*rlsv3.RateLimitRequest
	for i := range *values {
		item := *value
		if *values > 1 {
			item = fmt.Sprintf("%s-%d", *value, i)
		}
		reqs = append(reqs, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
				{Key: "resource", Value: "POST:/order"},
				{Key: "origin", Value: "serviceA"},
				{Key: "item_id", Value: item},
			}}}})
	}

	var t tally
	var measuring atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	switch *load {
	case "h2":
		var msgs [][]byte
		for _, req := range reqs {
			msg, err := proto.Marshal(req)
			if err != nil {
				log.Fatal(err)
			}
			msgs = append(msgs, msg)
		}
		h2req := newH2Request(*addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", msgs...)
		first := 0 // each connection starts at its own value, its clients' share ahead of the one before
		for i := range *conns {
			// the clients spread over the connections as evenly as they divide
			streams := *clients / *conns
			if i < *clients%*conns {
				streams++
			}
			wg.Add(1)
			go func(first int) {
				defer wg.Done()
				if err := runH2(*addr, h2req, first, streams, &measuring, stop, &t); err != nil {
					log.Fatalf("%s: %v", *name, err)
				}
			}(first)
			first += streams
		}
	case "grpc":
		var opts []grpc.DialOption
		switch *windows {
		case "static":
			// grpc-go's default windows grow by BDP estimation: a ping for every round trip
			// of data, which each server answers; Envoy's windows are fixed by its options
			opts = append(opts, grpc.WithStaticStreamWindowSize(1<<20), grpc.WithStaticConnWindowSize(1<<20))
		case "dynamic":
		default:
			log.Fatalf("-grpc-windows %q: want static or dynamic", *windows)
		}
		grpcLoad(*addr, reqs, *clients, *conns, opts, &measuring, stop, &wg, &t)
	default:
		log.Fatalf("-load %q: want h2 or grpc", *load)
	}
	time.Sleep(time.Second) // warm-up: connections made, scripts loaded
	rpid := redisPid(*redisAddr)
	cpu0, calls0, scripts0 := redisStats(*redisAddr)
	wake0 := wakeups(rpid)
	svc0, self0 := processCPU(*pid), processCPU(os.Getpid())
	begin := time.Now()
	measuring.Store(true)
	time.Sleep(*dur)
	measuring.Store(false)
	elapsed := time.Since(begin)
	cpu1, calls1, scripts1 := redisStats(*redisAddr)
	wake1 := wakeups(rpid)
	svc1, self1 := processCPU(*pid), processCPU(os.Getpid())
	close(stop)
	wg.Wait()

	n := t.ok.Load() + t.over.Load()
	if n == 0 {
		log.Fatalf("%s: no answer (%d failed)", *name, t.failed.Load())
	}
	perCheck := (cpu1 - cpu0) / float64(n) * 1e6
	svcPerCheck := (svc1 - svc0) / float64(n) * 1e6
	// what one core spent on the service and its Redis answers: the checks a second the two
	// could give with a core to themselves, whatever the load generator took
	capacity := "-"
	if *pid != 0 && svcPerCheck+perCheck > 0 {
		capacity = fmt.Sprintf("%.0f", 1e6/(svcPerCheck+perCheck))
	}
	// Redis's wakeups: the times its event loop went to sleep and was woken (its voluntary
	// context switches), each a read of what its clients sent since
	wakes := "-"
	if rpid != 0 && wake1 > wake0 {
		wakes = fmt.Sprintf("%.0f/s, %.1f us of cpu each", float64(wake1-wake0)/elapsed.Seconds(), (cpu1-cpu0)/float64(wake1-wake0)*1e6)
	}
	fmt.Printf("%-10s %8.0f checks/s  ok %8d  over %8d  failed %d  redis cpu %6.3f us/check  redis commands %6.3f/check (script calls %6.3f)  service cpu %6.2f us/check  client cpu %6.2f us/check  checks per cpu-second of service+redis %s  redis wakeups %s\n",
		*name, float64(n)/elapsed.Seconds(), t.ok.Load(), t.over.Load(), t.failed.Load(), perCheck,
		float64(calls1-calls0)/float64(n), float64(scripts1-scripts0)/float64(n), svcPerCheck, (self1-self0)/float64(n)*1e6, capacity, wakes)
	if t.failed.Load() > 0 {
		os.Exit(1)
	}
}

// grpcLoad starts clients goroutines that call ShouldRateLimit with reqs in turn (client i
// starting at the i-th) through grpc-go's client, on conns connections dialled with opts, until
// stop is closed, counting the answers in t while measuring is on.
func grpcLoad(addr string, reqs []*rlsv3.RateLimitRequest, clients, conns int, opts []grpc.DialOption, measuring *atomic.Bool, stop <-chan struct{}, wg *sync.WaitGroup, t *tally) {
	var cs []rlsv3.RateLimitServiceClient
	for range conns {
		cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		if err != nil {
			log.Fatal(err)
		}
		go func() { <-stop; cc.Close() }()
		cs = append(cs, rlsv3.NewRateLimitServiceClient(cc))
	}
	for i := range clients {
		c := cs[i%len(cs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next := i; ; next++ {
				req := reqs[next%len(reqs)]
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.ShouldRateLimit(ctx, req)
				cancel()
				if !measuring.Load() {
					continue
				}
				switch {
				case err != nil:
					t.failed.Add(1)
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					t.ok.Add(1)
				default:
					t.over.Add(1)
				}
			}
		}()
	}
}

// processCPU returns the CPU seconds (user and system) process pid has used, from /proc; 0 for
// pid 0.
func processCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		log.Fatal(err)
	}
	// the fields after the command name (which may hold spaces) start after the last ')'
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // clock ticks: USER_HZ is 100 on Linux
}

// redisPid returns the process id of the redis-server at addr (INFO server), 0 when it is not
// said.
func redisPid(addr string) int {
	for _, line := range strings.Split(redisInfo(addr, "server"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return 0
}

// wakeups returns the voluntary context switches of process pid so far (/proc), 0 for pid 0 or
// a process this one cannot see.
func wakeups(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// redisStats returns the CPU seconds redis-server has used, the commands it has run (a script's
// own redis.call commands counted too, as INFO counts them) and the script calls among them,
// from INFO cpu and INFO commandstats.
func redisStats(addr string) (cpu float64, calls, scripts int64) {
	info := redisInfo(addr, "cpu") + redisInfo(addr, "commandstats")
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		k, v, _ := strings.Cut(line, ":")
		switch {
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_info":
			c, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			x, _ := strconv.ParseInt(c, 10, 64)
			calls += x
			if k == "cmdstat_evalsha" || k == "cmdstat_eval" {
				scripts += x
			}
		}
	}
	return cpu, calls, scripts
}

// redisInfo returns the INFO section of the server at addr.
func redisInfo(addr, section string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "INFO %s\r\n", section)
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		log.Fatalf("INFO %s: %q %v", section, head, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(head[1:]))
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		log.Fatal(err)
	}
	return string(body)
}
