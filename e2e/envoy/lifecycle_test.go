package envoy

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// steady is a steady load through Envoy: orders (both filters call the service), each of a new
// user (so that none waits or is limited), at a fixed rate with a bound on the requests
// in flight. What the clients saw is counted per phase, by the phase a request was sent in.
type steady struct {
	s      *stack
	mu     sync.Mutex
	phase  *phase
	phases map[string]*phase
	seen   atomic.Int64 // answered or failed, over all phases
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// startSteady sends rate requests a second, alternating HTTP/1.1 and HTTP/2, at most 50 in
// flight, until stopped.
func startSteady(s *stack, rate int) *steady {
	l := &steady{s: s, phases: map[string]*phase{}, stop: make(chan struct{}), done: make(chan struct{})}
	l.next("start")
	go l.run(rate)
	return l
}

func (l *steady) run(rate int) {
	defer close(l.done)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	slots := make(chan struct{}, 50)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			continue // 50 in flight: this tick is skipped
		}
		l.mu.Lock()
		ph := l.phase
		ph.inflight.Add(1)
		l.mu.Unlock()
		c := h1
		if i%2 == 1 {
			c = h2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := <-l.s.send(context.Background(), c, "POST", "/orders", orderHeaders(fmt.Sprintf("steady%d", i))...)
			ph.add(o)
			ph.inflight.Done()
			l.seen.Add(1)
			<-slots
		}()
	}
}

// phase is what the clients saw of the requests sent in one phase.
type phase struct {
	tally
	inflight sync.WaitGroup
}

// next starts the phase called name (requests sent from now on are counted in it) and waits
// until the requests of the phase before have been answered, so that what comes next cannot
// change their answers.
func (l *steady) next(name string) *tally {
	ph := &phase{}
	l.mu.Lock()
	prev := l.phase
	l.phase = ph
	l.phases[name] = ph
	l.mu.Unlock()
	if prev != nil {
		prev.inflight.Wait()
	}
	return &ph.tally
}

// counts is the tally of the phase called name.
func (l *steady) counts(name string) *tally { return &l.phases[name].tally }

// await waits until n more requests of any phase have been answered.
func (l *steady) await(t *testing.T, n int64) {
	t.Helper()
	want := l.seen.Load() + n
	if !eventually(60*time.Second, func() bool { return l.seen.Load() >= want }) {
		t.Fatalf("the load got %d answers in 60s, want %d", l.seen.Load(), want)
	}
}

// finish stops the load and waits for the requests in flight.
func (l *steady) finish() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// nonOK is how many requests of ta did not get 200, with the answers they got.
func nonOK(ta *tally) int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	n := 0
	for k, v := range ta.counts {
		if k != "200" {
			n += v
		}
	}
	return n
}

// reloadRules rewrites the stack's rules file with old replaced by new and waits until every
// replica applied it.
func reloadRules(t *testing.T, s *stack, old, new string) {
	t.Helper()
	b, err := os.ReadFile(s.rules)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), old) != 1 {
		t.Fatalf("the rules file has %q %d times, want once", old, strings.Count(string(b), old))
	}
	applied := make([]float64, len(s.svcs))
	for i, p := range s.svcs {
		applied[i] = metric(t, p.Get, "extauthz_rule_reloads_total", `result="applied"`)
	}
	tmp := s.rules + ".new"
	if err := os.WriteFile(tmp, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.rules); err != nil {
		t.Fatal(err)
	}
	for i, p := range s.svcs {
		if !eventually(30*time.Second, func() bool {
			return metric(t, p.Get, "extauthz_rule_reloads_total", `result="applied"`) > applied[i]
		}) {
			t.Fatalf("replica %d did not apply the new rules within 30s", i)
		}
	}
}

// restart stops replica i with SIGTERM and starts a new one on its address once it has exited.
func restart(t *testing.T, s *stack, i int) *testbin.Proc {
	t.Helper()
	old := s.svcs[i]
	if code := old.Stop(t); code != 0 {
		t.Errorf("extauthz exited %d on SIGTERM, want 0", code)
	}
	p := s.serve(old.GRPCAddr)
	s.svcs[i] = p
	if i == 0 {
		s.svc = p
	}
	return p
}

// only reports whether ta holds only the outcomes keys, and how many of each.
func only(ta *tally, keys ...string) bool {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	n := 0
	for _, k := range keys {
		n += ta.counts[k]
	}
	total := 0
	for _, v := range ta.counts {
		total += v
	}
	return n == total
}

// TestLifecycleUnderSteadyLoad runs a steady load (100 orders a second) through Envoy in front
// of one extauthz while it is reloaded, stalled (SIGSTOP until 50 answers came back), restarted
// with SIGTERM, and killed, and counts what the clients saw by the phase each request was sent
// in. A reload loses nothing. While the service cannot answer, ext_authz fails closed with its
// status_on_error, 503, and nothing else reaches a client: no connection error, no request let
// through. A restart of the only replica: Envoy retries the calls refused a connection in the
// gap, within the Check's 0.5s; what falls outside is answered 503.
func TestLifecycleUnderSteadyLoad(t *testing.T) {
	s := newStack(t, stackOptions{})
	l := startSteady(s, 100)
	defer l.finish()
	l.await(t, 100)

	l.next("reload")
	reloadRules(t, s, "    count: 5\n    duration: 1s\n    burst: 2\n", "    count: 6\n    duration: 1s\n    burst: 2\n")
	l.next("after reload")
	l.await(t, 100)

	l.next("stopping")
	if err := s.svc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	l.next("stalled")
	l.await(t, 50)
	if err := s.svc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	l.next("after stall")
	l.await(t, 100)

	l.next("restart")
	restart(t, s, 0)
	l.next("after restart")
	l.await(t, 100)

	l.next("killing")
	s.svc.Kill()
	l.next("down")
	rl := func() int64 {
		st := s.envoy.Stats(t)
		return st["cluster.upstream.ratelimit.extauthz_rl.ok"] + st["cluster.upstream.ratelimit.extauthz_rl.error"]
	}
	rlDown := rl()
	l.await(t, 50)
	l.next("starting")
	if n := rl() - rlDown; n != 0 {
		t.Errorf("%d rate-limit calls while extauthz was down: a request ext_authz failed went on", n)
	}
	p := s.serve(s.svc.GRPCAddr)
	s.svc, s.svcs[0] = p, p
	l.next("back")
	l.await(t, 100)
	l.finish()

	phases := []string{"start", "reload", "after reload", "stopping", "stalled", "after stall", "restart",
		"after restart", "killing", "down", "starting", "back"}
	for _, name := range phases {
		t.Logf("%-14s %v", name, l.counts(name))
	}
	for _, name := range []string{"start", "reload", "after reload", "after stall", "after restart", "back"} {
		if n := nonOK(l.counts(name)); n != 0 {
			t.Errorf("%s: %d requests did not get 200: %v", name, n, l.counts(name))
		}
	}
	for _, name := range []string{"stopping", "stalled", "restart", "killing", "starting"} {
		if !only(l.counts(name), "200", "503") {
			t.Errorf("%s: %v, want only 200 and 503 (status_on_error)", name, l.counts(name))
		}
	}
	if down := l.counts("down"); !only(down, "503") {
		t.Errorf("extauthz down: %v, want every request 503 (ext_authz fails closed with status_on_error)", down)
	}
	if l.counts("stalled").get("503") == 0 {
		t.Errorf("stalled: %v, want the requests sent while the service was stopped answered 503", l.counts("stalled"))
	}
}

// TestRateLimitFailsOpen points the rate-limit filter at a cluster that speaks no gRPC (the
// upstream), the one edit: every call fails, and the filter, failing open (failure_mode_deny:
// false), lets each request through without limit and without x-ratelimit headers. Eight
// orders of one user at once (their turns would span 700ms, past max_queueing_time) all pass.
func TestRateLimitFailsOpen(t *testing.T) {
	s := newStack(t, stackOptions{bootstrap: edited(t, envoyYAML,
		"                  envoy_grpc: {cluster_name: extauthz}\n", "                  envoy_grpc: {cluster_name: upstream}\n")})
	var ta tally
	var chans []<-chan outcome
	for i := range 8 {
		chans = append(chans, s.send(context.Background(), h2, "POST", fmt.Sprintf("/orders?n=%d", i), orderHeaders("erin")...))
	}
	for _, ch := range chans {
		ta.add(<-ch)
	}
	a := s.do(h1, "POST", "/orders?n=last", orderHeaders("erin")...)
	ta.add(outcome{status: a.status})
	st := s.envoy.Stats(t)
	t.Logf("9 orders of one user with the rate-limit service unreachable: %v; ratelimit error %d, failure_mode_allowed %d",
		&ta, st["cluster.upstream.ratelimit.extauthz_rl.error"], st["cluster.upstream.ratelimit.extauthz_rl.failure_mode_allowed"])
	if ta.get("200") != 9 {
		t.Errorf("orders with the rate-limit service unreachable: %v, want all 9 let through", &ta)
	}
	if n := st["cluster.upstream.ratelimit.extauthz_rl.failure_mode_allowed"]; n != 9 {
		t.Errorf("failure_mode_allowed = %d, want 9", n)
	}
	if v := a.header.Get("x-ratelimit-limit"); v != "" {
		t.Errorf("x-ratelimit-limit = %q on a request no limit applied to, want none", v)
	}
}

// TestRestartOneOfTwoReplicasUnderSteadyLoad restarts one of two replicas behind Envoy's
// cluster with SIGTERM, as a rolling update does, under a steady load, then reloads the rules
// of both: no client sees an error.
func TestRestartOneOfTwoReplicasUnderSteadyLoad(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 2})
	l := startSteady(s, 100)
	defer l.finish()
	l.await(t, 100)
	for round := range 3 {
		rs := l.next(fmt.Sprintf("restart %d", round))
		restart(t, s, round%2)
		l.await(t, 100)
		t.Logf("restart of replica %d: %v", round%2, rs)
	}
	rl := l.next("reload")
	reloadRules(t, s, "    count: 5\n    duration: 1s\n    burst: 2\n", "    count: 6\n    duration: 1s\n    burst: 2\n")
	l.await(t, 100)
	l.finish()
	t.Logf("reload of both: %v", rl)
	st := s.envoy.Stats(t)
	t.Logf("envoy retried %d calls the service could not have seen (%d connections refused), %d with success",
		st["cluster.extauthz.upstream_rq_retry"], st["cluster.extauthz.upstream_cx_connect_fail"], st["cluster.extauthz.upstream_rq_retry_success"])
	for name, ph := range l.phases {
		if n := nonOK(&ph.tally); n != 0 {
			t.Errorf("%s: %d requests did not get 200: %v", name, n, &ph.tally)
		}
	}
}
