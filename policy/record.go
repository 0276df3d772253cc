package policy

import (
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/audit"
	"github.com/extauthz/extauthz/rulestore"
)

// What a call's outcome is counted and audited as: the one record site of both APIs.

// named is the resource of the first entry that some rule of the rules c names
// (a hot-parameter rule of any kind, an authority rule, shadow rules included), or "": allowed
// requests are counted under their resource, while the label values stay bounded by the rules.
func (d *Decider) named(c *ruleCache, entries []descriptors.Entry) string {
	if c == nil {
		return ""
	}
	for i := range entries {
		r := entries[i].Resource
		if c.set.ParamFlow.Names(r) || c.set.Authority.Names(r) {
			return r
		}
	}
	return ""
}

// record is the one place a call's outcome is counted.
func (d *Decider) record(req *Request, v *Verdict, start time.Time) {
	resource := ""
	switch v.Outcome {
	case DryRun, Authority, ParamFlow, QueueFull, ShuttingDown:
		resource = v.Block.Resource
	case Shadow, ShadowThrottled:
		resource = v.ShadowBlock.Resource
	case Allowed, Throttled, Cancelled:
		if v.Rules != nil {
			resource = d.named(v.Rules.lookups, req.Entries)
		}
	}
	if d.rec != nil {
		d.rec.Decision(req.API, req.Domain, resource, v.Outcome, d.now().Sub(start))
	}
}

// Audit is the audit record of the call v decided (the decision log's line, the trace's
// attributes), in the terms of audit.Decision: built from v and the Request it decided, which
// must not have changed since. The zero Verdict's is the zero Decision.
func (v *Verdict) Audit() audit.Decision {
	var a audit.Decision
	req := v.req
	if req == nil {
		return a
	}
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
	a.Result = v.Outcome.AuditResult()
	describe := func(b *Block) {
		a.Rule, a.Param, a.Value = b.RuleName(), b.Param, b.Value
		a.Reason = b.Reason
		if b.Kind == Authority {
			a.Reason = Authority.Label()
		}
		if b.Resource != "" {
			a.Resource, a.Origin = b.Resource, b.Origin
		}
	}
	switch v.Outcome {
	case DryRun, Authority, ParamFlow, QueueFull, ShuttingDown:
		describe(&v.Block)
	case Invalid, Cancelled:
		a.Reason = v.Outcome.Label()
	case Shadow, ShadowThrottled:
		a.Shadow = true
		describe(&v.ShadowBlock)
	}
	return a
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
	bl := Block{Kind: ParamFlow, Rule: b.Rule, Param: b.Param, Value: b.Value, Reason: ReasonName(b.Reason)}
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
