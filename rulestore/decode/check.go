package decode

import (
	"encoding/json"
	"fmt"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
)

// The checks every dialect makes of the rules it decodes, and the keeping of the rules that pass.

// Text returns the text of a Scalar given for field. In a YAML file, a value written as a bare
// number or boolean is refused, because YAML has already changed it (017 reads as 15, 1.50 as
// 1.5, yes as true); it must be quoted. JSON keeps a number's text as written.
func (p *File) Text(r *Problems, field string, s Scalar) (string, bool) {
	if s.Bare && p.YAML {
		r.Add(field, "write %s in quotes: YAML reads it as a number or boolean, which may change its text (017 reads as 15)", s.Text)
		return "", false
	}
	return s.Text, true
}

// AddAuthority keeps rule if r found no problem, and records the problems otherwise.
func (p *File) AddAuthority(r *Problems, rule authority.Rule) {
	if len(r.Errs) == 0 {
		p.Authority = append(p.Authority, rule)
		p.AuthPos = append(p.AuthPos, r.Index)
	}
	r.Done(&p.Errs, rule.Resource)
}

// Items decodes a list of exception items with one, which returns an item's value and count
// and whether it is usable; duplicate values and negative counts are reported here.
func (p *File) Items(r *Problems, field string, raws []json.RawMessage, one func(raw json.RawMessage, prefix string) (string, int64, bool)) map[string]int64 {
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
			r.Add(prefix+"count", "must not be negative, got %d", count)
			continue
		}
		if k, dup := first[value]; dup {
			r.Add(prefix+"value", "%q is already given by %s[%d]", value, field, k)
			continue
		}
		first[value] = j
		items[value] = count
	}
	return items
}

// RuleFields names a param-flow rule's fields in the format being read, for messages. Lease
// is "" in a format without the field.
type RuleFields struct {
	Grade, Behavior, Count, Burst, MaxQueueing, Refund, Cluster, Lease string
}

// CheckParamFlow checks the rules that hold between a param-flow rule's fields, in either
// format. Fields that do not apply to the rule's grade or behaviour are errors when non-zero
// (zero values are accepted, so that a template listing every field parses):
//   - concurrency rules take no throttle behaviour, no burst and no refund (they always
//     release); qps rules take a lease only with refund (a refund expires at the lease);
//   - max_queueing_time applies only to throttle rules, and burst only to reject rules (a
//     throttled value is spaced evenly, it has no bucket).
func (p *File) CheckParamFlow(r *Problems, rule *hotparam.Rule, f RuleFields) {
	if rule.Count < 0 {
		r.Add(f.Count, "must not be negative, got %d", rule.Count)
	}
	if rule.Burst < 0 {
		r.Add(f.Burst, "must not be negative, got %d", rule.Burst)
	}
	if rule.MaxQueueingTime < 0 {
		r.Add(f.MaxQueueing, "must not be negative, got %s", rule.MaxQueueingTime)
	}
	switch rule.Grade {
	case hotparam.Concurrency:
		if rule.Behavior == hotparam.Throttle {
			r.Add(f.Behavior, "throttle applies only to qps rules, not to concurrency rules")
		}
		if rule.Burst > 0 {
			r.Add(f.Burst, "applies only to qps rules, not to concurrency rules")
		}
		if rule.Refund {
			r.Add(f.Refund, "concurrency rules always release on negative hits; refund applies only to qps rules")
		}
		if rule.Postpaid {
			r.Add("charge", "postpaid applies only to qps rules (a budget charged after the response), not to concurrency rules")
		}
		if rule.MaxQueueingTime > 0 && rule.Behavior != hotparam.Throttle {
			r.Add(f.MaxQueueing, "applies only to throttle rules")
		}
	case hotparam.QPS:
		if rule.Lease != 0 && f.Lease != "" && !rule.Refund {
			r.Add(f.Lease, "applies only to concurrency rules and to qps rules with refund: true (how long a refund stays possible)")
		}
		if rule.Behavior == hotparam.Reject && rule.MaxQueueingTime > 0 {
			r.Add(f.MaxQueueing, "applies only to throttle rules; this rule's behavior is reject")
		}
		if rule.Behavior == hotparam.Throttle && rule.Burst > 0 {
			r.Add(f.Burst, "applies only to reject rules; a throttle rule spaces requests evenly")
		}
		if rule.Postpaid && rule.Behavior == hotparam.Throttle {
			r.Add("charge", "postpaid applies only to reject rules: a throttle rule holds requests, it keeps no budget")
		}
		if rule.Postpaid && rule.Refund {
			r.Add(f.Refund, "a postpaid rule charges what a response used: there is nothing to refund")
		}
	}
	if rule.Cluster && !p.Opts.ClusterEnabled {
		r.Add(f.Cluster, "cluster rules need a store.redis config")
	}
}

// AddParamFlow keeps rule if r found no problem, and records the problems otherwise. A kept
// concurrency rule gets a warning.
func (p *File) AddParamFlow(r *Problems, i int, rule hotparam.Rule) {
	if len(r.Errs) == 0 {
		if rule.Grade == hotparam.Concurrency {
			p.Warn(SectionParamFlow, i, rule.Resource, ConcurrencyWarning)
		}
		p.ParamFlow = append(p.ParamFlow, rule)
		p.ParamPos = append(p.ParamPos, i)
	}
	r.Done(&p.Errs, rule.Resource)
}

// CheckDomain reports a domain given but empty, or one no rate-limit call can have.
func CheckDomain(r *Problems, domain string) {
	switch {
	case r.Failed("domain"):
	case domain == "":
		r.Add("domain", "must not be empty (leave the field out for a rule of every domain)")
	case len(domain) > descriptors.MaxLen:
		r.Add("domain", "is %d bytes, longer than the %d a rate-limit call's domain may be", len(domain), descriptors.MaxLen)
	}
}

// RequireResource reports an empty resource, unless the field already failed to decode.
func RequireResource(r *Problems, resource string) {
	if resource == "" && !r.Failed("resource") {
		r.Add("resource", "must not be empty")
	}
}
