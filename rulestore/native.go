package rulestore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/memlimit"
)

// The sections of the native format.
const (
	sectionAuthority = "authority"
	sectionParamFlow = "param_flow"
	// sectionAPI addresses a Sentinel ApiDefinition in a list of gateway rules.
	sectionAPI = "api"
)

// nativeFile is the top level of the native format.
type nativeFile struct {
	Authority json.RawMessage `json:"authority"`
	ParamFlow json.RawMessage `json:"param_flow"`
}

// authorityDoc is one authority rule as written.
type authorityDoc struct {
	Resource      string   `json:"resource"`
	Domain        string   `json:"domain"` // refused: authority rules apply to every domain
	Strategy      string   `json:"strategy"`
	Origins       []scalar `json:"origins"`
	MissingOrigin string   `json:"missing_origin"`
	Shadow        bool     `json:"shadow"`
	Literal       bool     `json:"literal"`
}

// paramFlowDoc is one param-flow rule as written.
type paramFlowDoc struct {
	Resource        string            `json:"resource"`
	Domain          string            `json:"domain"`
	Param           string            `json:"param"`
	Grade           string            `json:"grade"`
	Count           int64             `json:"count"`
	Duration        string            `json:"duration"`
	Burst           int64             `json:"burst"`
	Behavior        string            `json:"behavior"`
	MaxQueueingTime string            `json:"max_queueing_time"`
	Items           []json.RawMessage `json:"items"`
	Lease           string            `json:"lease"`
	Capacity        int               `json:"capacity"`
	StateBudget     string            `json:"state_budget"`
	Overflow        string            `json:"overflow"`
	Refund          bool              `json:"refund"`
	Charge          string            `json:"charge"`
	Cluster         bool              `json:"cluster"`
	Shadow          bool              `json:"shadow"`
	Match           json.RawMessage   `json:"match"`
}

// itemDoc is one exception item as written.
type itemDoc struct {
	Value scalar `json:"value"`
	Count int64  `json:"count"`
}

// native decodes the native format's top level.
func (p *parser) native(ms []member) {
	var f nativeFile
	top := ruleErrs{file: p.file, index: -1}
	decodeMembers(ms, &f, "", top.add)
	top.done(&p.errs, "")
	if elems, ok := p.list(sectionAuthority, f.Authority); ok {
		for i, e := range elems {
			p.authorityRule(i, e)
		}
	}
	if elems, ok := p.list(sectionParamFlow, f.ParamFlow); ok {
		p.rules.ParamFlow = slices.Grow(p.rules.ParamFlow, len(elems))
		p.paramPos = slices.Grow(p.paramPos, len(elems))
		for i, e := range elems {
			p.paramFlowRule(i, e)
		}
	}
}

// authorityRule decodes and checks authority[i].
func (p *parser) authorityRule(i int, raw json.RawMessage) {
	r := p.rule(sectionAuthority, i)
	var d authorityDoc
	given := decodeStrict(raw, &d, "", r.add)
	if !given.ok() {
		r.done(&p.errs, "")
		return
	}
	rule := authority.Rule{Resource: d.Resource, Shadow: d.Shadow, Literal: d.Literal}
	requireResource(r, d.Resource)
	if given.has("domain") && !fieldFailed(r, "domain") {
		r.add("domain", "applies only to param_flow rules: an authority rule applies to the calls of every domain")
	}
	switch {
	case fieldFailed(r, "strategy"):
	case d.Strategy == "":
		r.add("strategy", "required: white or black")
	case d.Strategy == "white":
		rule.Strategy = authority.White
	case d.Strategy == "black":
		rule.Strategy = authority.Black
	default:
		r.add("strategy", "unknown strategy %q (white | black)", d.Strategy)
	}
	switch d.MissingOrigin {
	case "":
	case "deny":
		rule.MissingOrigin = authority.MissingDeny
	case "allow":
		rule.MissingOrigin = authority.MissingAllow
	default:
		r.add("missing_origin", "unknown value %q (deny | allow)", d.MissingOrigin)
	}
	switch {
	case fieldFailed(r, "origins"):
	case len(d.Origins) == 0:
		r.add("origins", "must list at least one origin")
	case d.Literal:
		rule.Origins = p.literalOrigins(r, "origins", d.Origins)
	default:
		rule.Origins = p.origins(r, "origins", d.Origins)
	}
	p.addAuthority(r, rule)
}

// origins checks each origin entry and returns them as strings.
func (p *parser) origins(r *ruleErrs, field string, in []scalar) []string {
	out := make([]string, 0, len(in))
	for j, o := range in {
		name := fmt.Sprintf("%s[%d]", field, j)
		s, ok := p.text(r, name, o)
		if !ok {
			continue
		}
		if err := authority.ValidateOrigin(s); err != nil {
			r.add(name, "%v", err)
			continue
		}
		out = append(out, s)
	}
	return out
}

// text returns the text of a scalar given for field. In a YAML file, a value written as a bare
// number or boolean is refused, because YAML has already changed it (017 reads as 15, 1.50 as
// 1.5, yes as true); it must be quoted. JSON keeps a number's text as written.
func (p *parser) text(r *ruleErrs, field string, s scalar) (string, bool) {
	if s.bare && p.yaml {
		r.add(field, "write %s in quotes: YAML reads it as a number or boolean, which may change its text (017 reads as 15)", s.text)
		return "", false
	}
	return s.text, true
}

// addAuthority keeps rule if r found no problem, and records the problems otherwise.
func (p *parser) addAuthority(r *ruleErrs, rule authority.Rule) {
	if len(r.errs) == 0 {
		p.rules.Authority = append(p.rules.Authority, rule)
		p.authPos = append(p.authPos, r.index)
	}
	r.done(&p.errs, rule.Resource)
}

// paramFlowRule decodes and checks param_flow[i].
func (p *parser) paramFlowRule(i int, raw json.RawMessage) {
	r := p.rule(sectionParamFlow, i)
	// One document serves every rule of the file (a local one would be allocated per rule, as
	// decoding takes its address); nothing of it is kept past this rule.
	d := &p.paramDoc
	*d = paramFlowDoc{}
	given := decodeStrict(raw, d, "", r.add)
	if !given.ok() {
		r.done(&p.errs, "")
		return
	}
	rule := hotparam.Rule{
		Resource: d.Resource,
		Domain:   d.Domain,
		Param:    d.Param,
		Count:    d.Count,
		Burst:    d.Burst,
		Refund:   d.Refund,
		Cluster:  d.Cluster,
		Shadow:   d.Shadow,
	}
	requireResource(r, d.Resource)
	if given.has("domain") {
		checkDomain(r, d.Domain)
	}
	if d.Param == "" && !fieldFailed(r, "param") {
		r.add("param", "must not be empty")
	}
	if !given.has("count") && !fieldFailed(r, "count") {
		r.add("count", "required")
	}
	switch d.Grade {
	case "", "qps":
		rule.Grade = hotparam.QPS
	case "concurrency":
		rule.Grade = hotparam.Concurrency
	default:
		r.add("grade", "unknown grade %q (qps | concurrency)", d.Grade)
	}
	switch d.Behavior {
	case "", "reject":
		rule.Behavior = hotparam.Reject
	case "throttle":
		rule.Behavior = hotparam.Throttle
	default:
		r.add("behavior", "unknown behavior %q (reject | throttle)", d.Behavior)
	}
	rule.Duration = time.Second
	if given.has("duration") {
		if v, ok := duration(d.Duration, true, "duration", r.add); ok {
			rule.Duration = v
			if v < time.Millisecond {
				r.add("duration", "must be at least 1ms, got %s", d.Duration)
			}
		}
	}
	rule.MaxQueueingTime, _ = duration(d.MaxQueueingTime, given.has("max_queueing_time"), "max_queueing_time", r.add)
	var ok bool
	rule.Lease, ok = duration(d.Lease, given.has("lease"), "lease", r.add)
	if ok && rule.Lease != 0 && rule.Lease < time.Millisecond {
		r.add("lease", "must be at least 1ms (or 0 for the default), got %s", d.Lease)
	}
	if given.has("capacity") {
		if d.Capacity < 1 {
			r.add("capacity", "must be at least 1, got %d", d.Capacity)
		}
		rule.Capacity = d.Capacity
	}
	if given.has("state_budget") {
		if n, err := memlimit.ParseSize(d.StateBudget); err != nil {
			r.add("state_budget", "%s", strings.TrimSuffix(err.Error(), ", or off"))
		} else {
			rule.StateBudget = n
		}
	}
	if given.has("overflow") {
		switch d.Overflow {
		case "forget":
			rule.Overflow = hotparam.OverflowForget
		case "refuse":
			rule.Overflow = hotparam.OverflowRefuse
		default:
			r.add("overflow", "unknown overflow %q (forget | refuse)", d.Overflow)
		}
	}
	rule.Items = p.items(r, "items", d.Items, func(raw json.RawMessage, prefix string) (string, int64, bool) {
		var it itemDoc
		g := decodeStrict(raw, &it, prefix, r.add)
		if !g.ok() {
			return "", 0, false
		}
		value, ok := p.text(r, prefix+"value", it.Value)
		if !g.has("value") && !fieldFailed(r, prefix+"value") {
			r.add(prefix+"value", "required")
		} else if ok && g.has("value") && value == "" {
			r.add(prefix+"value", "must not be empty")
		}
		if !g.has("count") && !fieldFailed(r, prefix+"count") {
			r.add(prefix+"count", "required")
		}
		return value, it.Count, ok && g.has("value") && g.has("count") && value != ""
	})
	switch d.Charge {
	case "", "prepaid":
	case "postpaid":
		rule.Postpaid = true
	default:
		r.add("charge", "unknown charge %q (prepaid | postpaid)", d.Charge)
	}
	if given.has("match") {
		if m := nativeMatch(d.Match, r); m != nil {
			rule.Match = m
			if n, ok := m.(*Number); ok {
				rule.Items = n.keyItems(r, rule.Items)
			}
		}
	}
	fields := ruleFields{
		grade: "grade", behavior: "behavior", count: "count", burst: "burst",
		maxQueueing: "max_queueing_time", refund: "refund", cluster: "cluster", lease: "lease",
	}
	p.checkParamFlow(r, &rule, fields)
	p.addParamFlow(r, i, rule)
}

// fieldFailed reports whether r already has a problem with field (a decoding error), so that a
// second, less precise one is not added.
func fieldFailed(r *ruleErrs, field string) bool {
	for _, e := range r.errs {
		if e.Field == field {
			return true
		}
	}
	return false
}

// items decodes a list of exception items with one, which returns an item's value and count
// and whether it is usable; duplicate values and negative counts are reported here.
func (p *parser) items(r *ruleErrs, field string, raws []json.RawMessage, one func(raw json.RawMessage, prefix string) (string, int64, bool)) map[string]int64 {
	if len(raws) == 0 {
		return nil
	}
	items := make(map[string]int64, len(raws))
	first := make(map[string]int, len(raws))
	for j, raw := range raws {
		prefix := fmt.Sprintf("%s[%d].", field, j)
		value, count, ok := one(raw, prefix)
		if !ok {
			continue
		}
		if count < 0 {
			r.add(prefix+"count", "must not be negative, got %d", count)
			continue
		}
		if k, dup := first[value]; dup {
			r.add(prefix+"value", "%q is already given by %s[%d]", value, field, k)
			continue
		}
		first[value] = j
		items[value] = count
	}
	return items
}

// ruleFields names a param-flow rule's fields in the format being read, for messages.
type ruleFields struct {
	grade, behavior, count, burst, maxQueueing, refund, cluster, lease string
}

// checkParamFlow checks the rules that hold between a param-flow rule's fields, in either
// format. Fields that do not apply to the rule's grade or behaviour are errors when non-zero
// (zero values are accepted, so that a template listing every field parses):
//   - concurrency rules take no throttle behaviour, no burst and no refund (they always
//     release); qps rules take a lease only with refund (a refund expires at the lease);
//   - max_queueing_time applies only to throttle rules, and burst only to reject rules (a
//     throttled value is spaced evenly, it has no bucket).
func (p *parser) checkParamFlow(r *ruleErrs, rule *hotparam.Rule, f ruleFields) {
	if rule.Count < 0 {
		r.add(f.count, "must not be negative, got %d", rule.Count)
	}
	if rule.Burst < 0 {
		r.add(f.burst, "must not be negative, got %d", rule.Burst)
	}
	if rule.MaxQueueingTime < 0 {
		r.add(f.maxQueueing, "must not be negative, got %s", rule.MaxQueueingTime)
	}
	switch rule.Grade {
	case hotparam.Concurrency:
		if rule.Behavior == hotparam.Throttle {
			r.add(f.behavior, "throttle applies only to qps rules, not to concurrency rules")
		}
		if rule.Burst > 0 {
			r.add(f.burst, "applies only to qps rules, not to concurrency rules")
		}
		if rule.Refund {
			r.add(f.refund, "concurrency rules always release on negative hits; refund applies only to qps rules")
		}
		if rule.Postpaid {
			r.add("charge", "postpaid applies only to qps rules (a budget charged after the response), not to concurrency rules")
		}
		if rule.MaxQueueingTime > 0 && rule.Behavior != hotparam.Throttle {
			r.add(f.maxQueueing, "applies only to throttle rules")
		}
	case hotparam.QPS:
		if rule.Lease != 0 && f.lease != "" && !rule.Refund {
			r.add(f.lease, "applies only to concurrency rules and to qps rules with refund: true (how long a refund stays possible)")
		}
		if rule.Behavior == hotparam.Reject && rule.MaxQueueingTime > 0 {
			r.add(f.maxQueueing, "applies only to throttle rules; this rule's behavior is reject")
		}
		if rule.Behavior == hotparam.Throttle && rule.Burst > 0 {
			r.add(f.burst, "applies only to reject rules; a throttle rule spaces requests evenly")
		}
		if rule.Postpaid && rule.Behavior == hotparam.Throttle {
			r.add("charge", "postpaid applies only to reject rules: a throttle rule holds requests, it keeps no budget")
		}
		if rule.Postpaid && rule.Refund {
			r.add(f.refund, "a postpaid rule charges what a response used: there is nothing to refund")
		}
	}
	if rule.Cluster && !p.opts.ClusterEnabled {
		r.add(f.cluster, "cluster rules need a store.redis config")
	}
}

// addParamFlow keeps rule if r found no problem, and records the problems otherwise. A kept
// concurrency rule gets a warning.
func (p *parser) addParamFlow(r *ruleErrs, i int, rule hotparam.Rule) {
	if len(r.errs) == 0 {
		if rule.Grade == hotparam.Concurrency {
			p.warn(sectionParamFlow, i, rule.Resource, ConcurrencyWarning)
		}
		p.rules.ParamFlow = append(p.rules.ParamFlow, rule)
		p.paramPos = append(p.paramPos, i)
	}
	r.done(&p.errs, rule.Resource)
}

// checkDomain reports a domain given but empty, or one no rate-limit call can have.
func checkDomain(r *ruleErrs, domain string) {
	switch {
	case fieldFailed(r, "domain"):
	case domain == "":
		r.add("domain", "must not be empty (leave the field out for a rule of every domain)")
	case len(domain) > descriptors.MaxLen:
		r.add("domain", "is %d bytes, longer than the %d a rate-limit call's domain may be", len(domain), descriptors.MaxLen)
	}
}

// requireResource reports an empty resource, unless the field already failed to decode.
func requireResource(r *ruleErrs, resource string) {
	if resource == "" && !fieldFailed(r, "resource") {
		r.add("resource", "must not be empty")
	}
}
