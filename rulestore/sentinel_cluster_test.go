package rulestore

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// TestSentinelClusterRules: a Sentinel cluster rule becomes what Sentinel's token server
// decides: count per second (times store.redis.replicas for thresholdType 0, items too), no
// burst, reject, whatever its durationInSec, burstCount and controlBehavior say; a rule whose
// clusterConfig Sentinel finds invalid is skipped; a thread-count rule stays local.
func TestSentinelClusterRules(t *testing.T) {
	cluster := func(count int64) hotparam.Rule {
		return hotparam.Rule{Resource: "r", Param: "p", Count: count, Duration: time.Second, Cluster: true}
	}
	tests := []struct {
		name     string
		rule     string // the fields after resource and paramIdx
		clients  int
		fallback string
		want     []hotparam.Rule
		warnings []string // substrings, in order, one per warning
	}{
		{name: "global count", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"flowId": 1, "thresholdType": 1, "fallbackToLocalWhenFail": true}`,
			clients: 3, fallback: "local", want: []hotparam.Rule{cluster(5)}},
		{name: "global count, fallback allow", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"flowId": 1, "thresholdType": 1}`,
			clients: 3, fallback: "allow", want: []hotparam.Rule{cluster(5)}},
		{name: "per client: times the replicas", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"flowId": 1, "thresholdType": 0, "fallbackToLocalWhenFail": true}`,
			clients: 3, fallback: "local", want: []hotparam.Rule{cluster(15)},
			warnings: []string{"clusterConfig.thresholdType 0 (a count per connected client): the count is multiplied by the replicas sharing the store, store.redis.replicas (3), as Sentinel's token server multiplies it by its connected clients: 15 per second"}},
		{name: "thresholdType defaults to 0, fallbackToLocalWhenFail to false", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"flowId": 1}`,
			clients: 2, fallback: "allow", want: []hotparam.Rule{cluster(10)}, warnings: []string{"store.redis.replicas (2)"}},
		{name: "no replicas configured is one", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"flowId": 1}`,
			want: []hotparam.Rule{cluster(5)}, warnings: []string{"store.redis.replicas (1)"}},
		{name: "a fraction of the product is cut", rule: `"count": 2.5, "clusterMode": true, "clusterConfig": {"flowId": 1}`,
			clients: 3, want: []hotparam.Rule{cluster(7)}, warnings: []string{"7 per second"}},
		{name: "items are per client too", rule: `"count": 5, "paramFlowItemList": [{"object": "vip", "count": 2}], "clusterMode": true, "clusterConfig": {"flowId": 1}`,
			clients: 3, want: []hotparam.Rule{{Resource: "r", Param: "p", Count: 15, Duration: time.Second, Cluster: true, Items: map[string]int64{"vip": 6}}},
			warnings: []string{"(3)"}},
		{name: "duration, burst and behaviour ignored", rule: `"count": 4, "durationInSec": 5, "burstCount": 2, "controlBehavior": 2, "maxQueueingTimeMs": 100, "clusterMode": true, "clusterConfig": {"flowId": 1, "thresholdType": 1}`,
			clients: 3, want: []hotparam.Rule{cluster(4)},
			warnings: []string{"durationInSec, burstCount, controlBehavior 2, maxQueueingTimeMs: ignored on a cluster rule, as Sentinel's token server ignores it"}},
		{name: "another window", rule: `"count": 4, "clusterMode": true, "clusterConfig": {"flowId": 1, "thresholdType": 1, "sampleCount": 4, "windowIntervalMs": 2000}`,
			want: []hotparam.Rule{cluster(4)}, warnings: []string{"clusterConfig.windowIntervalMs 2000"}},
		{name: "fallback differs", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"flowId": 2, "thresholdType": 1, "fallbackToLocalWhenFail": false}`,
			fallback: "local", want: []hotparam.Rule{cluster(5)},
			warnings: []string{"asks for store.redis.fallback: allow while the store fails, but it is local"}},
		{name: "no clusterConfig is skipped", rule: `"count": 5, "clusterMode": true`,
			warnings: []string{"clusterMode without a clusterConfig: Sentinel skips this rule as invalid, so it limits nothing, and it is not loaded here either"}},
		{name: "no flowId is skipped", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"thresholdType": 1, "fallbackToLocalWhenFail": true}`,
			warnings: []string{"clusterConfig.flowId of 0 (it must be above 0): Sentinel skips this rule"}},
		{name: "an uneven window is skipped", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"flowId": 1, "sampleCount": 3}`,
			warnings: []string{"sampleCount 3 and windowIntervalMs 1000 (both must be above 0, the window a multiple of the count): Sentinel skips"}},
		{name: "no samples is skipped", rule: `"count": 5, "clusterMode": true, "clusterConfig": {"flowId": 1, "sampleCount": 0}`,
			warnings: []string{"Sentinel skips this rule as invalid"}},
		{name: "thread count stays local", rule: `"grade": 0, "count": 5, "clusterMode": true, "clusterConfig": {"flowId": 1}`,
			clients: 3, want: []hotparam.Rule{{Resource: "r", Param: "p", Grade: hotparam.Concurrency, Count: 5, Duration: time.Second}},
			warnings: []string{"clusterMode on a thread-count rule: Sentinel sends only QPS rules to its token server and checks this one locally", ConcurrencyWarning}},
		{name: "a local rule's clusterConfig is not used", rule: `"count": 5, "durationInSec": 2, "clusterConfig": {"thresholdType": 0}`,
			clients: 3, want: []hotparam.Rule{{Resource: "r", Param: "p", Count: 5, Duration: 2 * time.Second}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := `[{"resource": "r", "paramIdx": 0, ` + tc.rule + `}]`
			rules, err := Parse("r.json", []byte(doc), ParseOptions{ParamNames: []string{"p"}, ClusterEnabled: true,
				ClusterFallback: tc.fallback, ClusterClients: tc.clients})
			if err != nil {
				t.Fatal(err)
			}
			if len(rules.ParamFlow)+len(tc.want) > 0 && !reflect.DeepEqual(rules.ParamFlow, tc.want) {
				t.Errorf("rules\n got %+v\nwant %+v", rules.ParamFlow, tc.want)
			}
			if len(rules.Warnings) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %d", rules.Warnings, len(tc.warnings))
			}
			for i, w := range tc.warnings {
				if !strings.Contains(rules.Warnings[i], w) {
					t.Errorf("warning %q, want it to contain %q", rules.Warnings[i], w)
				}
			}
		})
	}
	// A misspelt clusterConfig field is refused, on a cluster rule or not.
	for _, mode := range []string{"true", "false"} {
		doc := `[{"resource": "r", "paramIdx": 0, "count": 1, "clusterMode": ` + mode + `, "clusterConfig": {"flowId": 1, "sampleCnt": 10}}]`
		if _, err := Parse("r.json", []byte(doc), ParseOptions{ParamNames: []string{"p"}, ClusterEnabled: true}); err == nil || !strings.Contains(err.Error(), `did you mean "sampleCount"`) {
			t.Errorf("clusterMode %s: Parse = %v, want an unknown field with did-you-mean", mode, err)
		}
	}
}

// TestSentinelClusterDecisions: the imported rule of count 2 per client on three replicas
// admits six hits a second in all, and after a second six more: what the token server admits
// against count × connected clients, as a per-second average (no burst).
func TestSentinelClusterDecisions(t *testing.T) {
	doc := `[{"resource": "r", "paramIdx": 0, "count": 2, "burstCount": 10, "durationInSec": 60, "clusterMode": true, "clusterConfig": {"flowId": 1}}]`
	rules, err := Parse("r.json", []byte(doc), ParseOptions{ParamNames: []string{"p"}, ClusterEnabled: true, ClusterClients: 3})
	if err != nil {
		t.Fatal(err)
	}
	rule := rules.ParamFlow[0]
	rule.Cluster = false // the same rule on one limiter: its counts are the shared ones
	lim, err := hotparam.New([]hotparam.Rule{rule}, hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	admitted := func(at time.Time, n int) int {
		got := 0
		for range n {
			d := lim.Check(t.Context(), at, []hotparam.Entry{{Resource: "r", Hits: 1, Params: []hotparam.Param{{Name: "p", Values: []string{"a"}}}}}, hotparam.CheckOptions{}, nil)
			if d.Allowed {
				got++
			}
		}
		return got
	}
	if got := admitted(start, 10); got != 6 {
		t.Errorf("at 0 s: %d of 10 admitted, want 6", got)
	}
	if got := admitted(start.Add(500*time.Millisecond), 10); got != 3 {
		t.Errorf("at 0.5 s: %d of 10 admitted, want 3 (six a second)", got)
	}
	if got := admitted(start.Add(1500*time.Millisecond), 10); got != 6 {
		t.Errorf("at 1.5 s: %d of 10 admitted, want 6", got)
	}
}
