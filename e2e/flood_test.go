package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// floodRules limit each item to 3 an hour, tracking at most 1,000 items.
const floodRules = `
authority:
  - resource: "GET:/items"
    strategy: white
    origins: [web]
param_flow:
  - resource: "GET:/items"
    param: item_id
    grade: qps
    count: 3
    duration: 1h
    capacity: 1000
`

// withValue is rr with every descriptor entry of value from replaced by to.
func withValue(rr *rlsv3.RateLimitRequest, from, to string) *rlsv3.RateLimitRequest {
	out := proto.Clone(rr).(*rlsv3.RateLimitRequest)
	for _, d := range out.GetDescriptors() {
		for _, e := range d.GetEntries() {
			if e.GetValue() == from {
				e.Value = to
			}
		}
	}
	return out
}

// evictions sums extauthz_hotparam_evictions_total on /metrics.
func evictions(t *testing.T, s *service) float64 {
	t.Helper()
	resp, err := http.Get(s.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "extauthz_hotparam_evictions_total") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// TestFloodCannotResetALimitedValue is issue 8's second case through the binary: with a
// capacity of 1,000, an item limited to 3 an hour is asked every 200ms for 5s while other
// clients send new items as fast as they can. Evicting the depleted item must not hand it a
// new allowance: at most 3 of its 25 requests pass.
func TestFloodCannotResetALimitedValue(t *testing.T) {
	s := newService(t, []byte(floodRules))
	hot := limitRequest(t, itemReq("hot-item"), false)
	template := limitRequest(t, itemReq("FLOOD"), false)
	const flooders = 8
	floods := make([][]*rlsv3.RateLimitRequest, flooders)
	for i := range floods {
		for j := range 4096 {
			floods[i] = append(floods[i], withValue(template, "FLOOD", "f-"+strconv.Itoa(i)+"-"+strconv.Itoa(j)))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for i := range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ctx.Err() == nil; j++ {
				// a value comes back only after 4,096 others: as good as new for the store
				if _, err := s.rls.ShouldRateLimit(ctx, floods[i][j%len(floods[i])]); err == nil {
					sent.Add(1)
				}
			}
		}()
	}
	// The item is asked every 200ms: at least 25 times (5s), and on until the flood has evicted
	// 10,000 values (ten times the capacity), however slow the machine makes the flood.
	admitted, asked := 0, 0
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	var ev float64
	for {
		<-tick.C
		if s.limit(t, hot).GetOverallCode() == rlsv3.RateLimitResponse_OK {
			admitted++
		}
		asked++
		if asked >= 25 {
			if ev = evictions(t, s); ev >= 10_000 {
				break
			}
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("only %.0f evictions in 2 minutes: the flood did not press the store", ev)
		}
	}
	tick.Stop()
	cancel()
	wg.Wait()
	t.Logf("flood: %d requests of new items in %s, %.0f evictions; the limited item: %d of %d admitted",
		sent.Load(), time.Since(start).Round(time.Millisecond), ev, admitted, asked)
	if admitted > 3 {
		t.Fatalf("%d of %d requests of an item limited to 3 an hour admitted under a flood, want at most 3", admitted, asked)
	}
}

// TestFloodRefusesNoInnocentItem: on the same rule (3 an hour, capacity 1,000), 20,000 new
// items each asked once (each leaves a state to keep when evicted) make the store evict 19,000
// times; then 200 items never seen before each get their 3 requests, and a 4th is refused.
// Before the states of evicted items were kept exactly, this refused most new items outright.
func TestFloodRefusesNoInnocentItem(t *testing.T) {
	s := newService(t, []byte(floodRules))
	template := limitRequest(t, itemReq("FLOOD"), false)
	const flood, flooders = 20_000, 8
	var wg sync.WaitGroup
	var refusedFlood atomic.Int64
	for g := range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := g; j < flood; j += flooders {
				if s.limit(t, withValue(template, "FLOOD", "f-"+strconv.Itoa(j))).GetOverallCode() != rlsv3.RateLimitResponse_OK {
					refusedFlood.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ev := evictions(t, s); ev < flood-1000 {
		t.Fatalf("%.0f evictions, want at least %d: the flood did not press the store", ev, flood-1000)
	}
	short, wrong := 0, 0
	for i := range 200 {
		rr := withValue(template, "FLOOD", "innocent-"+strconv.Itoa(i))
		for j := range 4 {
			ok := s.limit(t, rr).GetOverallCode() == rlsv3.RateLimitResponse_OK
			switch {
			case j < 3 && !ok:
				short++
			case j == 3 && ok:
				wrong++
			}
		}
	}
	t.Logf("%d flood items refused; innocents: %d requests of their allowance refused, %d admitted past it", refusedFlood.Load(), short, wrong)
	if refusedFlood.Load() != 0 || short != 0 || wrong != 0 {
		t.Fatalf("%d new flood items refused, %d innocent requests refused within their allowance, %d admitted past it; want 0, 0, 0",
			refusedFlood.Load(), short, wrong)
	}
}
