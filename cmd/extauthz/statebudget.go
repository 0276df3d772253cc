package main

import (
	"go.uber.org/zap"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/memlimit"
)

// stateBudget sets the budgets of the hot-param states of evicted values and what a rule does
// past them, and logs each overflow the limiter reports (once a second per rule at most).
// The config was validated: a size that does not parse leaves hotparam's default.
func stateBudget(o *hotparam.Options, cfg config.HotParamConfig, log *zap.Logger) {
	o.StateBudget, _ = memlimit.ParseSize(cfg.StateBudget)
	o.RuleStateBudget, _ = memlimit.ParseSize(cfg.RuleStateBudget)
	_ = o.Overflow.UnmarshalText([]byte(cfg.Overflow))
	o.OnOverflow = func(e hotparam.OverflowEvent) {
		what := "forgot the state of an evicted value, which gets its allowance back"
		if e.Overflow == hotparam.OverflowRefuse {
			what = "refused a new value"
		}
		log.Warn("hot-param state budget full: "+what, zap.Int("rule", e.Rule),
			zap.String("resource", e.Resource), zap.String("param", e.Param),
			zap.Stringer("overflow", e.Overflow), zap.Uint64("overflows", e.Total), zap.Int64("state_bytes", e.Bytes))
	}
}
