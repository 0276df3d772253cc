package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// raceRules are rules of every hot-param kind on one resource; %d is a count that each
// rewrite of the file changes, so that the reload compiles that rule again and keeps the
// others as they are.
const raceRules = `
param_flow:
  - {resource: R, param: q, count: %d, duration: 1s, capacity: 64}
  - {resource: R, param: c, grade: concurrency, count: 4, capacity: 64}
  - {resource: R, param: t, count: 1000, duration: 1s, behavior: throttle, max_queueing_time: 50ms}
  - {resource: R, param: f, count: 5, duration: 1s, refund: true, lease: 10s}
`

// TestReloadUnderLoadHasNoRace runs the binary built with the race detector, reloads its
// rules file again and again while calls of every rule kind (acquires and releases), /hot and
// /metrics run, and fails on any race the detector reports (it prints "DATA RACE" and makes the
// process exit 66).
func TestReloadUnderLoadHasNoRace(t *testing.T) {
	dir := t.TempDir()
	bin, err := testbin.Build(moduleRoot, dir, "-race")
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.yaml")
	write := func(count int) {
		tmp := rules + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf(raceRules, count)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, rules); err != nil {
			t.Fatal(err)
		}
	}
	write(1000)
	cfg, err := filepath.Abs(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, testbin.Options{
		Binary: bin,
		Args: []string{"serve", "--config", cfg, "--rules", rules,
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		Env:   []string{"EXTAUTHZ_SWEEP_INTERVAL=50ms", "EXTAUTHZ_DECISION_LOG_ENABLED=false"},
		Ready: 60 * time.Second,
	})
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				v := strconv.Itoa(g) + "-" + strconv.Itoa(i%200) // more values than capacity: evictions
				lease := "l" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				d := rlDesc("resource", "R", "q", v, "c", strconv.Itoa(i%3), "t", "t", "f", v, "lease_id", lease)
				if _, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
					Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}}); err != nil {
					continue
				}
				release := rlDesc("resource", "R", "c", strconv.Itoa(i%3), "f", v, "lease_id", lease)
				release.HitsAddend, release.IsNegativeHits = wrapperspb.UInt64(1), true
				_, _ = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
					Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{release}})
				calls.Add(1)
			}
		}()
	}
	for i := range 40 {
		write(1000 + i + 1)
		want := uint64(i + 2)
		if !eventually(30*time.Second, func() bool {
			_, body := p.Get(t, "/rules")
			var info rulesInfo
			return json.Unmarshal([]byte(body), &info) == nil && info.Version == want
		}) {
			t.Fatalf("reload %d was not applied within 30s", i+1)
		}
		p.Get(t, "/hot?n=5")
		p.Get(t, "/metrics")
	}
	cancel()
	wg.Wait()
	if calls.Load() == 0 {
		t.Fatal("no call was answered: the reloads ran without load")
	}
	code := p.Stop(t)
	if log := p.LogText(); strings.Contains(log, "DATA RACE") || code == 66 {
		t.Fatalf("the race detector found a race (exit %d):\n%s", code, log)
	}
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
	t.Logf("%d calls answered across 40 reloads", calls.Load())
}
