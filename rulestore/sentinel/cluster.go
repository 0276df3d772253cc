package sentinel

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
)

// A Sentinel param-flow rule in clusterMode is decided by Sentinel's token server
// (sentinel-cluster-server-default), which reads little of it:
//   - ParamFlowRuleUtil.checkCluster: a clusterMode rule without a clusterConfig, with a flowId
//     of 0 or below, or a window that is not sampleCount > 0, windowIntervalMs > 0 and
//     windowIntervalMs % sampleCount == 0 (FlowRuleUtil.isWindowConfigValid) is invalid, and
//     ParamFlowRuleManager skips it: it limits nothing;
//   - ParamFlowChecker.passCheck sends only QPS rules (grade 1) to the server; a thread-count
//     rule in clusterMode is checked locally;
//   - ClusterParamFlowChecker.acquireClusterToken admits a request while, for each of its
//     values, threshold - metric.getAvg(value) - hits >= 0: getAvg is the value's hits over
//     the last windowIntervalMs per second (ClusterParamMetric), and calcGlobalThreshold is
//     count (or the value's item count) for thresholdType 1, and that times the namespace's
//     connected clients (ClusterParamFlowRuleManager.getConnectedCount) for thresholdType 0 and
//     any other. durationInSec, burstCount, controlBehavior and maxQueueingTimeMs are never read.
//
// So an imported cluster rule is a reject rule of count per second (count times the replicas
// sharing the store, store.redis.replicas, for thresholdType 0: each replica is a client of the
// shared store, as each application instance is a client of the token server), refilled
// continuously (see "Where extauthz differs on purpose": continuous refill), with no burst.

// sentinelClusterDoc is a param-flow rule's clusterConfig (ParamFlowClusterConfig), with
// Sentinel's defaults for sampleCount (10) and windowIntervalMs (1000) when not given.
type sentinelClusterDoc struct {
	FlowID                  int64 `json:"flowId"`
	ThresholdType           int   `json:"thresholdType"`
	FallbackToLocalWhenFail bool  `json:"fallbackToLocalWhenFail"`
	SampleCount             int   `json:"sampleCount"`
	WindowIntervalMs        int64 `json:"windowIntervalMs"`
}

// clusterImport is what sentinelCluster decided for a rule: its warnings, and whether the rule
// is one Sentinel skips.
type clusterImport struct {
	notes []string
	skip  bool
}

// sentinelCluster reads a Sentinel param-flow rule's clusterMode and clusterConfig and makes
// rule the token server's rule when it applies (see above). rule's count, items, grade and
// local fields must already be set.
func (p *parser) sentinelCluster(r *decode.Problems, rule *hotparam.Rule, d sentinelParamDoc, given decode.Fields) clusterImport {
	var out clusterImport
	cc := sentinelClusterDoc{SampleCount: 10, WindowIntervalMs: 1000}
	if given.Has("clusterConfig") && !p.f.Strict(d.ClusterConfig, &cc, "clusterConfig.", r.Add).OK() {
		return out // checked strictly, as every field
	}
	if !d.ClusterMode {
		return out // a local rule's clusterConfig is not used, as in Sentinel
	}
	var invalid string
	switch {
	case !given.Has("clusterConfig"):
		invalid = "clusterMode without a clusterConfig"
	case cc.FlowID <= 0:
		invalid = fmt.Sprintf("clusterMode with a clusterConfig.flowId of %d (it must be above 0)", cc.FlowID)
	case cc.SampleCount <= 0 || cc.WindowIntervalMs <= 0 || cc.WindowIntervalMs%int64(cc.SampleCount) != 0:
		invalid = fmt.Sprintf("clusterMode with clusterConfig.sampleCount %d and windowIntervalMs %d (both must be above 0, the window a multiple of the count)", cc.SampleCount, cc.WindowIntervalMs)
	}
	if invalid != "" {
		out.skip = true
		out.notes = append(out.notes, invalid+": Sentinel skips this rule as invalid, so it limits nothing, and it is not loaded here either (give it a valid clusterConfig, or drop clusterMode, to limit)")
		return out
	}
	if rule.Grade != hotparam.QPS {
		out.notes = append(out.notes, "clusterMode on a thread-count rule: Sentinel sends only QPS rules to its token server and checks this one locally, and so here")
		return out
	}
	if !p.f.Opts.ClusterEnabled {
		out.notes = append(out.notes, "clusterMode: no shared store is configured (store.redis), so the rule is imported as a local rule: each replica counts on its own")
		return out
	}
	clients := int64(max(p.f.Opts.ClusterClients, 1))
	perClient := cc.ThresholdType != 1
	if perClient {
		rule.Count = clusterCount(r, "count", d.Count, clients)
		for v, n := range rule.Items {
			rule.Items[v] = clusterCount(r, "paramFlowItemList", float64(n), clients)
		}
	}
	var ignored []string
	if given.Has("durationInSec") && d.DurationInSec != 1 {
		ignored = append(ignored, "durationInSec")
	}
	if d.BurstCount != 0 {
		ignored = append(ignored, "burstCount")
	}
	if d.ControlBehavior != 0 {
		ignored = append(ignored, fmt.Sprintf("controlBehavior %d", d.ControlBehavior))
	}
	if d.MaxQueueingTimeMs != 0 && d.ControlBehavior == 2 {
		ignored = append(ignored, "maxQueueingTimeMs")
	}
	rule.Cluster = true
	rule.Duration = time.Second
	rule.Burst = 0
	rule.Behavior = hotparam.Reject
	rule.MaxQueueingTime = 0
	if len(ignored) > 0 {
		out.notes = append(out.notes, fmt.Sprintf("%s: ignored on a cluster rule, as Sentinel's token server ignores it: the rule admits count per second, shared by all replicas", strings.Join(ignored, ", ")))
	}
	if perClient {
		out.notes = append(out.notes, fmt.Sprintf("clusterConfig.thresholdType %d (a count per connected client): the count is multiplied by the replicas sharing the store, store.redis.replicas (%d), as Sentinel's token server multiplies it by its connected clients: %d per second, shared (set store.redis.replicas to the number of replicas)", cc.ThresholdType, clients, rule.Count))
	}
	if cc.WindowIntervalMs != 1000 {
		out.notes = append(out.notes, fmt.Sprintf("clusterConfig.windowIntervalMs %d: Sentinel's token server averages a value's requests per second over that window; here the count per second is refilled continuously", cc.WindowIntervalMs))
	}
	want := "allow" // ParamFlowClusterConfig's default is false: Sentinel then lets requests through
	if cc.FallbackToLocalWhenFail {
		want = "local"
	}
	if have := p.f.Opts.ClusterFallback; have != "" && have != want {
		out.notes = append(out.notes, fmt.Sprintf("clusterConfig.fallbackToLocalWhenFail asks for store.redis.fallback: %s while the store fails, but it is %s (it applies to every cluster rule)", want, have))
	}
	return out
}

// clusterCount is floor(count × clients), the whole number of hits a second that Sentinel's
// token server admits against a threshold of count × clients.
func clusterCount(r *decode.Problems, field string, count float64, clients int64) int64 {
	f := math.Floor(count * float64(clients))
	if f >= 1<<62 {
		r.Add(field, "times store.redis.replicas (%d) is too large: %s", clients, decode.FormatNumber(count))
		return 0
	}
	return int64(f)
}
