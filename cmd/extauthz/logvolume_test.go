package main

// The decision log under a flood of refusals, through the built binary: lines a second are
// capped, the rest counted, and long origins and values cut.
//
// With EXTAUTHZ_LOGVOLUME_BASELINE=<git revision> the same flood also runs against the binary
// built from that revision, and both figures are printed side by side (go test -v).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/observe"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// floodRules refuse every call of value v but its first.
const floodRules = `
param_flow:
  - resource: "POST:/flood"
    param: item_id
    grade: qps
    count: 1
    duration: 1h
`

// logMeter counts what the process writes to stderr, by second and kind of line.
type logMeter struct {
	mu         sync.Mutex
	bytes      int
	decisions  int              // decision lines
	suppressed uint64           // as the suppressed lines report
	perSecond  map[int64]int    // decision lines by the second they were logged in
	longest    int              // the longest decision line, bytes
	lines      []map[string]any // the first decision lines, for their fields
}

func (m *logMeter) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bytes += len(p)
	var e map[string]any
	if json.Unmarshal(p, &e) != nil {
		return len(p), nil
	}
	switch e["msg"] {
	case "decision":
		m.decisions++
		m.longest = max(m.longest, len(p))
		if ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e["ts"])); err == nil {
			m.perSecond[ts.Unix()]++
		}
		if len(m.lines) < 3 {
			m.lines = append(m.lines, e)
		}
	case observe.MsgSuppressed:
		n, _ := e["suppressed"].(float64)
		m.suppressed += uint64(n)
	}
	return len(p), nil
}

// floodResult is what one flood measured.
type floodResult struct {
	calls, refused int64
	counted        int64 // refusals in the service's own metrics
	took           time.Duration
	meter          *logMeter
}

// flood sends refused ShouldRateLimit calls with 4,000-byte origins and values to the binary
// bin for d, from 8 goroutines, and measures its log from start to the last suppressed line.
func flood(t *testing.T, bin string, d time.Duration) floodResult {
	t.Helper()
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", floodRules)
	m := &logMeter{perSecond: make(map[int64]int)}
	p := testbin.Start(t, testbin.Options{Binary: bin, Dir: dir, Output: m,
		Args: []string{"--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}})
	conns := []rlsv3.RateLimitServiceClient{
		rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr)),
		rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr)),
	}
	origin, value := strings.Repeat("o", 4000), strings.Repeat("v", 4000)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "resource", Value: "POST:/flood"}, {Key: "origin", Value: origin}, {Key: "item_id", Value: value},
		}}}}
	var calls, refused atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := conns[i%len(conns)]
			for ctx.Err() == nil {
				resp, err := c.ShouldRateLimit(ctx, req)
				if err != nil {
					continue // the flood's end
				}
				calls.Add(1)
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(begin)
	// The last second's count is reported about a second after it ends.
	time.Sleep(1500 * time.Millisecond)
	// The refusals the service counted: a few calls the flood's end cancelled count there only.
	_, body := p.Get(t, "/metrics")
	counted := int64(metricValue(body,
		`extauthz_decisions_total{api="ratelimit",domain="edge",resource="POST:/flood",result="param_flow"}`))
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	return floodResult{calls: calls.Load(), refused: refused.Load(), counted: counted, took: took, meter: m}
}

func (r floodResult) String() string {
	s := r.took.Seconds()
	return fmt.Sprintf("%.0f refusals/s: %.0f log bytes/s, %.0f decision lines/s, longest line %d bytes",
		float64(r.refused)/s, float64(r.meter.bytes)/s, float64(r.meter.decisions)/s, r.meter.longest)
}

// Under a refusal flood, at most decision_log.max_per_second decision lines a second are
// written, each suppressed refusal is reported in the suppressed lines and counted in
// extauthz_decision_log_suppressed_total, and a line stays under 1.5 KB however long the
// origin and value sent.
func TestBinaryDecisionLogFlood(t *testing.T) {
	after := flood(t, binary(t), 3*time.Second)
	t.Logf("after:  %v", after)
	m := after.meter
	if after.refused < 1000 {
		t.Fatalf("only %d refusals in the flood; too few to show the cap", after.refused)
	}
	for sec, n := range m.perSecond {
		if n > observe.DefaultMaxPerSecond {
			t.Errorf("%d decision lines in second %d, want at most %d", n, sec, observe.DefaultMaxPerSecond)
		}
	}
	if got := int64(m.decisions) + int64(m.suppressed); got != after.counted || after.counted < after.refused {
		t.Errorf("%d decision lines + %d reported suppressed = %d, want the %d refusals counted (%d answered)",
			m.decisions, m.suppressed, got, after.counted, after.refused)
	}
	if m.longest > 1500 {
		t.Errorf("longest decision line %d bytes, want under 1500", m.longest)
	}
	want := strings.Repeat("o", observe.MaxFieldLen) + "…[truncated, 4000 bytes]"
	if len(m.lines) == 0 || m.lines[len(m.lines)-1]["origin"] != want {
		t.Errorf("decision lines %v; want the origin cut to %d bytes and marked", m.lines, observe.MaxFieldLen)
	}

	if base := os.Getenv("EXTAUTHZ_LOGVOLUME_BASELINE"); base != "" {
		before := flood(t, buildRevision(t, base), 3*time.Second)
		t.Logf("before (%s): %v", base, before)
		t.Logf("after:  %v", after)
	}
}

// TestBinaryDecisionLogSuppressedMetric: the suppressed lines are counted in
// extauthz_decision_log_suppressed_total, with the count the log reports.
func TestBinaryDecisionLogSuppressedMetric(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", floodRules)
	cfg := writeFile(t, dir, "extauthz.yaml", "decision_log: {max_per_second: 2}\n")
	p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	rls := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	for range 20 {
		rateLimit(t, rls, "POST:/flood", "v")
	}
	p.WaitLog(t, observe.MsgSuppressed, 5*time.Second)
	var reported uint64
	eventually(t, "the metric to count every suppressed line", func() bool {
		reported = 0
		for _, e := range entries(p, observe.MsgSuppressed) {
			reported += uint64(e["suppressed"].(float64))
		}
		_, body := p.Get(t, "/metrics")
		n := uint64(metricValue(body, "extauthz_decision_log_suppressed_total"))
		return n == reported && n+uint64(len(entries(p, "decision"))) == 19
	})
	if reported == 0 {
		t.Error("no line reported suppressed with max_per_second 2 and 19 refusals")
	}
}

// buildRevision builds the binary of the repository's revision rev.
func buildRevision(t *testing.T, rev string) string {
	t.Helper()
	src := t.TempDir()
	archive := exec.Command("sh", "-c", "git archive "+rev+" | tar -x -C "+src)
	archive.Dir = "../.."
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	bin, err := testbin.Build(src, filepath.Join(src, "bin"))
	if err != nil {
		t.Fatalf("build %s: %v", rev, err)
	}
	return bin
}
