package main

import (
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/policy"
)

// recorder is the decision path's Recorder: the service's metrics, and a warning in the log
// for each concurrency rule that only ext_authz Check calls reach.
type recorder struct {
	*metrics.Metrics
	log *zap.Logger
}

var _ policy.UnenforcedRecorder = recorder{}

// ConcurrencyUnenforced counts and logs a concurrency rule that Check calls reached, and no
// rate-limit call, for idle.
func (r recorder) ConcurrencyUnenforced(resource string, rule int, idle time.Duration) {
	r.Metrics.ConcurrencyUnenforced(resource, rule, idle)
	r.log.Warn("a concurrency rule limits nothing: its resource sees ext_authz Check calls and no rate-limit call, and Check has no completion signal; send the resource's requests through Envoy's rate-limit filter too (with the lease key), or make the rule a qps rule",
		zap.String("rule", "param_flow["+strconv.Itoa(rule)+"]"), zap.String("resource", resource), zap.Duration("for", idle))
}
