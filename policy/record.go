package policy

import (
	"context"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/audit"
	"github.com/extauthz/extauthz/rulestore"
)

// What a call's outcome is counted and audited as: the one record site of both APIs.

// named is the resource of the first entry that some rule of set names (a hot-parameter rule
// of any kind, an authority rule, shadow rules included), or "": allowed requests are counted
// under their resource, while the label values stay bounded by the rules.
func (d *Decider) named(set *rulestore.Set, entries []descriptors.Entry) string {
	if set == nil {
		return ""
	}
	c := d.cache(set)
	for i := range entries {
		r := entries[i].Resource
		if _, ok := c.names[r]; ok || set.Authority.Names(r) {
			return r
		}
	}
	return ""
}

// record is the one place a call's outcome is counted and audited.
func (d *Decider) record(ctx context.Context, req *Request, v *Verdict, start time.Time) {
	result, resource := ResultOK, ""
	switch {
	case v.DryRun:
		result, resource = ResultDryRun, v.Block.Resource
	case v.Kind == Invalid:
		result = ResultInvalid
	case v.Kind == Authority || v.Kind == ParamFlow:
		result, resource = v.Block.Kind, v.Block.Resource
		if v.queueFull {
			result = ResultQueueFull
		}
		if v.shuttingDown {
			result = ResultShuttingDown
		}
	case v.Kind == Cancelled:
		result, resource = ResultCancelled, d.named(v.Rules, req.Entries)
	case v.Shadow:
		result, resource = ResultShadow, v.ShadowBlock.Resource
	default:
		resource = d.named(v.Rules, req.Entries)
	}
	if d.rec != nil {
		d.rec.Decision(req.API, req.Domain, resource, result, d.now().Sub(start))
	}
	if a := audit.FromContext(ctx); a != nil {
		fillAudit(a, req, v)
	}
}

// fillAudit writes the call's outcome in the terms of audit.Decision.
func fillAudit(a *audit.Decision, req *Request, v *Verdict) {
	a.API = "check"
	if req.API == APIRateLimit {
		a.API = "ratelimit"
	}
	a.RequestID = req.RequestID
	a.Domain = req.Domain
	at := v.At
	if at < 0 && len(req.Entries) > 0 {
		at = 0
	}
	if at >= 0 && at < len(req.Entries) {
		a.Resource, a.Origin = req.Entries[at].Resource, req.Entries[at].Origin
	}
	a.Wait = v.Wait
	describe := func(b *Block) {
		a.Rule, a.Param, a.Value = b.RuleName(), b.Param, b.Value
		a.Reason = b.Reason
		if b.Kind == ResultAuthority {
			a.Reason = ResultAuthority
		}
		if b.Resource != "" {
			a.Resource, a.Origin = b.Resource, b.Origin
		}
	}
	if v.DryRun {
		a.Result = "dry_run"
		describe(&v.Block)
		return
	}
	switch v.Kind {
	case Invalid:
		a.Result, a.Reason = "invalid", "invalid"
	case Authority, ParamFlow:
		a.Result = "blocked"
		describe(&v.Block)
	case Cancelled:
		a.Result, a.Reason = "cancelled", "cancelled"
	default:
		a.Result = "allowed"
		if v.Wait > 0 {
			a.Result = "throttled"
		}
		if v.Shadow {
			a.Shadow = true
			describe(&v.ShadowBlock)
		}
	}
}

// authorityReason says why the authority rule at i blocked origin.
func authorityReason(set *rulestore.Set, i int, origin string) string {
	if origin == "" {
		return "missing_origin"
	}
	rs := set.Authority.Rules()
	if i >= 0 && i < len(rs) && rs[i].Strategy == authority.Black {
		return "in_black_list"
	}
	return "not_in_white_list"
}

// paramBlock describes a hot-parameter block of one of entries.
func paramBlock(set *rulestore.Set, entries []descriptors.Entry, b *hotparam.Block) Block {
	bl := Block{Kind: ResultParamFlow, Rule: b.Rule, Param: b.Param, Value: b.Value, Reason: ReasonName(b.Reason)}
	if validEntry(b.Entry, len(entries)) {
		bl.Resource, bl.Origin = entries[b.Entry].Resource, entries[b.Entry].Origin
	}
	if set.ParamFlow != nil {
		if rs := set.ParamFlow.Rules(); b.Rule >= 0 && b.Rule < len(rs) {
			bl.Resource = rs[b.Rule].Resource
		}
	}
	return bl
}

// ReasonQueueFull is the reason of a request refused because the throttle queues are full.
const ReasonQueueFull = "queue_full"

// ReasonName names a hot-parameter block reason in bodies and logs: the reason's own spelling
// (hotparam's Reason.String), "none" for one without.
func ReasonName(r hotparam.Reason) string {
	if _, err := r.MarshalText(); err != nil {
		return hotparam.ReasonNone.String()
	}
	return r.String()
}

func validEntry(i, n int) bool { return i >= 0 && i < n }
