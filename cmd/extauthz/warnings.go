package main

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// warnStore warns at start of store settings that defeat the shared store: replicas left at
// 1 beside the local fallback, where each replica enforces a cluster rule's whole count on its
// own while Redis fails (the fleet then admits the count times its size).
//
// Whether replicas matches the fleet cannot be told from inside one replica: nothing it can
// read without the Kubernetes API gives the Deployment's replica count or its autoscaler's
// maximum. The shipped Helm chart and kustomize overlay set EXTAUTHZ_STORE_REDIS_REPLICAS from
// the same values as the Deployment and its autoscaler, and their tests check that they agree.
func warnStore(log *zap.Logger, r config.RedisConfig) {
	if r.Enabled() && r.Fallback == "local" && r.Replicas == 1 {
		log.Warn("store.redis.replicas is 1: while Redis fails, each replica enforces the whole count of cluster rules on its own",
			zap.String("fix", "set store.redis.replicas to the fleet's replica count (an autoscaler's maxReplicas)"))
	}
}

// warnRules warns of what set does not do as its settings suggest: throttle rules queueing
// longer than shutdown_grace, and a shared store no rule uses.
func (s *service) warnRules(e rulestore.Event) {
	if e.Set == nil {
		return
	}
	s.warnQueueing(e.Set)
	if s.cfg.Store.Redis.Enabled() && !anyCluster(e.Set.Rules.ParamFlow) {
		s.log.Warn("store.redis is configured but no rule is cluster: true; every replica counts on its own",
			zap.String("file", e.File), zap.Uint64("version", e.Version), zap.Int("rules", e.Rules),
			zap.String("fix", "set cluster: true on the rules whose limit is for the whole fleet"))
	}
}

// warnQueueing warns of each throttle rule of set whose max_queueing_time exceeds
// shutdown_grace: a call queued longer than the grace when the service stops is refused
// (shutting_down) rather than allowed in its turn.
func (s *service) warnQueueing(set *rulestore.Set) {
	for i, r := range set.Rules.ParamFlow {
		if r.Behavior == hotparam.Throttle && r.MaxQueueingTime > s.cfg.ShutdownGrace {
			s.log.Warn("throttle rule may queue calls longer than shutdown_grace; those still queued at shutdown are refused",
				zap.String("rule", fmt.Sprintf("param_flow[%d]", i)), zap.String("resource", r.Resource),
				zap.Duration("max_queueing_time", r.MaxQueueingTime), zap.Duration("shutdown_grace", s.cfg.ShutdownGrace))
		}
	}
}

// anyCluster reports whether one of rules keeps its state in the shared store.
func anyCluster(rules []hotparam.Rule) bool {
	for _, r := range rules {
		if r.Cluster {
			return true
		}
	}
	return false
}
