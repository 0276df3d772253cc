// Package native reads the service's own rules format: a mapping with the lists authority and
// param_flow, durations as Go duration strings (see the design's "Rules file").
package native

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/memlimit"
	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/match"
)

// nativeFile is the top level of the native format.
type nativeFile struct {
	Authority json.RawMessage `json:"authority"`
	ParamFlow json.RawMessage `json:"param_flow"`
}

// authorityDoc is one authority rule as written.
type authorityDoc struct {
	Resource      string          `json:"resource"`
	Domain        string          `json:"domain"` // refused: authority rules apply to every domain
	Strategy      string          `json:"strategy"`
	Origins       []decode.Scalar `json:"origins"`
	MissingOrigin string          `json:"missing_origin"`
	Shadow        bool            `json:"shadow"`
	Literal       bool            `json:"literal"`
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
	Value decode.Scalar `json:"value"`
	Count int64         `json:"count"`
}

// Decode reads a file of the native format, whose top level f has split into ms, into f.
func Decode(f *decode.File, ms []decode.Member) {
	p := parser{f: f}
	p.native(ms)
}

// Register registers the native format's document types and top-level keys with reg.
func Register(reg *decode.Registry) {
	reg.Register([]string{decode.SectionAuthority, decode.SectionParamFlow},
		nativeFile{}, authorityDoc{}, paramFlowDoc{}, itemDoc{}, matchDoc{})
}

// parser reads one file of the native format into f.
type parser struct {
	f   *decode.File
	doc paramFlowDoc // the param_flow rule being decoded
}

// native decodes the native format's top level.
func (p *parser) native(ms []decode.Member) {
	var f nativeFile
	top := decode.Problems{File: p.f.Name, Index: -1}
	p.f.Decode(ms, &f, "", top.Add)
	top.Done(&p.f.Errs, "")
	if elems, ok := p.f.List(decode.SectionAuthority, f.Authority); ok {
		for i, e := range elems {
			p.authorityRule(i, e)
		}
	}
	if elems, ok := p.f.List(decode.SectionParamFlow, f.ParamFlow); ok {
		p.f.ParamFlow = slices.Grow(p.f.ParamFlow, len(elems))
		p.f.ParamPos = slices.Grow(p.f.ParamPos, len(elems))
		for i, e := range elems {
			p.paramFlowRule(i, e)
		}
	}
}

// authorityRule decodes and checks authority[i].
func (p *parser) authorityRule(i int, raw json.RawMessage) {
	r := p.f.Rule(decode.SectionAuthority, i)
	var d authorityDoc
	given := p.f.Strict(raw, &d, "", r.Add)
	if !given.OK() {
		r.Done(&p.f.Errs, "")
		return
	}
	rule := authority.Rule{Resource: d.Resource, Shadow: d.Shadow, Literal: d.Literal}
	decode.RequireResource(r, d.Resource)
	if given.Has("domain") && !r.Failed("domain") {
		r.Add("domain", "applies only to param_flow rules: an authority rule applies to the calls of every domain")
	}
	switch {
	case r.Failed("strategy"):
	case d.Strategy == "":
		r.Add("strategy", "required: white or black")
	case d.Strategy == "white":
		rule.Strategy = authority.White
	case d.Strategy == "black":
		rule.Strategy = authority.Black
	default:
		r.Add("strategy", "unknown strategy %q (white | black)", d.Strategy)
	}
	switch d.MissingOrigin {
	case "":
	case "deny":
		rule.MissingOrigin = authority.MissingDeny
	case "allow":
		rule.MissingOrigin = authority.MissingAllow
	default:
		r.Add("missing_origin", "unknown value %q (deny | allow)", d.MissingOrigin)
	}
	switch {
	case r.Failed("origins"):
	case len(d.Origins) == 0:
		r.Add("origins", "must list at least one origin")
	case d.Literal:
		rule.Origins = p.literalOrigins(r, "origins", d.Origins)
	default:
		rule.Origins = p.origins(r, "origins", d.Origins)
	}
	p.f.AddAuthority(r, rule)
}

// origins checks each origin entry and returns them as strings.
func (p *parser) origins(r *decode.Problems, field string, in []decode.Scalar) []string {
	out := make([]string, 0, len(in))
	for j, o := range in {
		name := fmt.Sprintf("%s[%d]", field, j)
		s, ok := p.f.Text(r, name, o)
		if !ok {
			continue
		}
		if err := authority.ValidateOrigin(s); err != nil {
			r.Add(name, "%v", err)
			continue
		}
		out = append(out, s)
	}
	return out
}

// paramFlowRule decodes and checks param_flow[i].
func (p *parser) paramFlowRule(i int, raw json.RawMessage) {
	r := p.f.Rule(decode.SectionParamFlow, i)
	// One document serves every rule of the file (a local one would be allocated per rule, as
	// decoding takes its address); nothing of it is kept past this rule.
	d := &p.doc
	*d = paramFlowDoc{}
	given := p.f.Strict(raw, d, "", r.Add)
	if !given.OK() {
		r.Done(&p.f.Errs, "")
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
	decode.RequireResource(r, d.Resource)
	if given.Has("domain") {
		decode.CheckDomain(r, d.Domain)
	}
	if d.Param == "" && !r.Failed("param") {
		r.Add("param", "must not be empty")
	}
	if !given.Has("count") && !r.Failed("count") {
		r.Add("count", "required")
	}
	switch d.Grade {
	case "", "qps":
		rule.Grade = hotparam.QPS
	case "concurrency":
		rule.Grade = hotparam.Concurrency
	default:
		r.Add("grade", "unknown grade %q (qps | concurrency)", d.Grade)
	}
	switch d.Behavior {
	case "", "reject":
		rule.Behavior = hotparam.Reject
	case "throttle":
		rule.Behavior = hotparam.Throttle
	default:
		r.Add("behavior", "unknown behavior %q (reject | throttle)", d.Behavior)
	}
	rule.Duration = time.Second
	if given.Has("duration") {
		if v, ok := decode.Duration(d.Duration, true, "duration", r.Add); ok {
			rule.Duration = v
			if v < time.Millisecond {
				r.Add("duration", "must be at least 1ms, got %s", d.Duration)
			}
		}
	}
	rule.MaxQueueingTime, _ = decode.Duration(d.MaxQueueingTime, given.Has("max_queueing_time"), "max_queueing_time", r.Add)
	var ok bool
	rule.Lease, ok = decode.Duration(d.Lease, given.Has("lease"), "lease", r.Add)
	if ok && rule.Lease != 0 && rule.Lease < time.Millisecond {
		r.Add("lease", "must be at least 1ms (or 0 for the default), got %s", d.Lease)
	}
	if given.Has("capacity") {
		if d.Capacity < 1 {
			r.Add("capacity", "must be at least 1, got %d", d.Capacity)
		}
		rule.Capacity = d.Capacity
	}
	if given.Has("state_budget") {
		if n, err := memlimit.ParseSize(d.StateBudget); err != nil {
			r.Add("state_budget", "%s", strings.TrimSuffix(err.Error(), ", or off"))
		} else {
			rule.StateBudget = n
		}
	}
	if given.Has("overflow") {
		switch d.Overflow {
		case "forget":
			rule.Overflow = hotparam.OverflowForget
		case "refuse":
			rule.Overflow = hotparam.OverflowRefuse
		default:
			r.Add("overflow", "unknown overflow %q (forget | refuse)", d.Overflow)
		}
	}
	rule.Items = p.f.Items(r, "items", d.Items, func(raw json.RawMessage, prefix string) (string, int64, bool) {
		var it itemDoc
		g := p.f.Strict(raw, &it, prefix, r.Add)
		if !g.OK() {
			return "", 0, false
		}
		value, ok := p.f.Text(r, prefix+"value", it.Value)
		if !g.Has("value") && !r.Failed(prefix+"value") {
			r.Add(prefix+"value", "required")
		} else if ok && g.Has("value") && value == "" {
			r.Add(prefix+"value", "must not be empty")
		}
		if !g.Has("count") && !r.Failed(prefix+"count") {
			r.Add(prefix+"count", "required")
		}
		return value, it.Count, ok && g.Has("value") && g.Has("count") && value != ""
	})
	switch d.Charge {
	case "", "prepaid":
	case "postpaid":
		rule.Postpaid = true
	default:
		r.Add("charge", "unknown charge %q (prepaid | postpaid)", d.Charge)
	}
	if given.Has("match") {
		if m := p.match(d.Match, r); m != nil {
			rule.Match = m
			if n, ok := m.(*match.Number); ok {
				rule.Items = n.KeyItems(rule.Items, r.Add)
			}
		}
	}
	fields := decode.RuleFields{
		Grade: "grade", Behavior: "behavior", Count: "count", Burst: "burst",
		MaxQueueing: "max_queueing_time", Refund: "refund", Cluster: "cluster", Lease: "lease",
	}
	p.f.CheckParamFlow(r, &rule, fields)
	p.f.AddParamFlow(r, i, rule)
}
