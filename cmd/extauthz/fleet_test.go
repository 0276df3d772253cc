package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/admin"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// fleetOf reads /console/fleet of p.
func fleetOf(t *testing.T, p *proc) admin.FleetView {
	t.Helper()
	code, body := p.Get(t, "/console/fleet")
	if code != http.StatusOK {
		t.Fatalf("GET /console/fleet = %d %s", code, body)
	}
	var v admin.FleetView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode /console/fleet %s: %v", body, err)
	}
	return v
}

// counts is a replica's or the fleet's decisions in a fleet view.
type counts struct{ allowed, blocked uint64 }

func countsOf(c admin.FleetCounts) counts { return counts{c.AllowedTotal, c.BlockedTotal} }

// Two binaries on one Redis: each one's console shows both replicas, each with the decisions
// it made, and the fleet's sum, second by second.
func TestBinaryFleetView(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/orders", param: item_id, grade: qps, count: 2, duration: 1h}
`)
	cfg := writeFile(t, dir, "extauthz.yaml", fmt.Sprintf(`
store:
  redis:
    addrs: ["%s"]
    timeout: 100ms
admin:
  fleet_interval: 1s
`, srv.Addr()))
	var procs []*proc
	want := map[string]counts{}
	for i, sent := range []int{5, 3} { // each replica allows 2 (its own limit), blocks the rest
		p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
		procs = append(procs, p)
		c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
		var got counts
		for range sent {
			if code(t, c, "POST:/orders", fmt.Sprintf("item-%d", i)) == rlsv3.RateLimitResponse_OK {
				got.allowed++
			} else {
				got.blocked++
			}
		}
		if got != (counts{2, uint64(sent - 2)}) {
			t.Fatalf("replica %d: %+v, want 2 allowed and %d blocked", i, got, sent-2)
		}
		want[fleetOf(t, p).Self] = got
	}
	wantTotal := counts{4, 4}

	for _, p := range procs {
		var v admin.FleetView
		eventually(t, "both replicas with their counts in "+p.AdminAddr+"'s fleet view", func() bool {
			v = fleetOf(t, p)
			if len(v.Replicas) != 2 {
				return false
			}
			for _, r := range v.Replicas {
				if countsOf(r.Counts) != want[r.ID] {
					return false
				}
			}
			return true
		})
		if !v.Shared || v.Error != "" || v.IntervalSeconds != 1 || !v.Replicas[0].Self || v.Replicas[0].ID != v.Self {
			t.Errorf("%s: shared %v, error %q, interval %d, first replica %+v; want shared, no error, 1s, itself first",
				p.AdminAddr, v.Shared, v.Error, v.IntervalSeconds, v.Replicas[0].Replica)
		}
		if got := countsOf(v.Total); got != wantTotal {
			t.Errorf("%s: fleet total %+v, want %+v", p.AdminAddr, got, wantTotal)
		}
		for j := range v.Total.Allowed { // the sum holds second by second
			a := v.Replicas[0].Counts.Allowed[j] + v.Replicas[1].Counts.Allowed[j]
			b := v.Replicas[0].Counts.Blocked[j] + v.Replicas[1].Counts.Blocked[j]
			if v.Total.Allowed[j] != a || v.Total.Blocked[j] != b {
				t.Fatalf("%s: second %d: fleet %d/%d, replicas sum to %d/%d", p.AdminAddr, j, v.Total.Allowed[j], v.Total.Blocked[j], a, b)
			}
		}
		if r := v.Total.Resources; len(r) != 1 || r[0].Resource != "POST:/orders" || r[0].Allowed != 4 || r[0].Blocked != 4 {
			t.Errorf("%s: fleet resources %+v, want POST:/orders 4 allowed, 4 blocked", p.AdminAddr, r)
		}
		for _, r := range v.Replicas {
			if r.Admin == "" || r.PID == 0 || r.Host == "" {
				t.Errorf("%s: replica %+v: want its host, pid and admin address", p.AdminAddr, r.Replica)
			}
		}
	}
	if n := srv.CLI("ZCARD", "extauthz:{fleet}:replicas"); n != "2" {
		t.Errorf("ZCARD of the fleet's set = %s, want 2", n)
	}
}

// Without Redis the fleet view is this replica alone, and says so.
func TestBinaryFleetViewAlone(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/orders", param: item_id, grade: qps, count: 1, duration: 1h}
`)
	p := start(t, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	for range 3 {
		code(t, c, "POST:/orders", "x")
	}
	var v admin.FleetView
	eventually(t, "the three decisions in the fleet view", func() bool {
		v = fleetOf(t, p)
		return countsOf(v.Total) == counts{1, 2}
	})
	if v.Shared || len(v.Replicas) != 1 || !v.Replicas[0].Self || countsOf(v.Replicas[0].Counts) != (counts{1, 2}) {
		t.Errorf("shared %v, replicas %+v; want not shared, itself alone with 1 allowed, 2 blocked", v.Shared, v.Replicas)
	}
}

// A replica whose Redis is down logs once that it cannot publish, and once that it can again.
func TestBinaryFleetPublishOutage(t *testing.T) {
	srv := redistest.Start(t)
	cfg := writeFile(t, t.TempDir(), "extauthz.yaml", fmt.Sprintf(`
store:
  redis:
    addrs: ["%s"]
admin:
  fleet_interval: 1s
`, srv.Addr()))
	p := start(t, "--config", cfg, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	srv.Kill()
	p.WaitLog(t, "cannot publish this replica's counts for the console's fleet view; the other replicas' consoles miss it until it can", 15*time.Second)
	if v := fleetOf(t, p); v.Error == "" || len(v.Replicas) != 1 {
		t.Errorf("with Redis down: error %q, %d replicas; want the error, itself alone", v.Error, len(v.Replicas))
	}
	srv.Restart()
	p.WaitLog(t, "publishing this replica's counts for the console's fleet view again", 15*time.Second)
}
