package rulestore

import (
	"fmt"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
)

// AuthorityJSON is an authority rule as the rules file spells it, in the native format's
// field names: what /rules shows.
type AuthorityJSON struct {
	Resource      string   `json:"resource"`
	Strategy      string   `json:"strategy"`
	Origins       []string `json:"origins"`
	MissingOrigin string   `json:"missing_origin"`
	Shadow        bool     `json:"shadow"`            // evaluated and counted, never blocks
	Literal       bool     `json:"literal,omitempty"` // every origin compared as written
}

// ParamFlowJSON is a param-flow rule as the rules file spells it (defaults filled in).
type ParamFlowJSON struct {
	Resource        string           `json:"resource"`
	Domain          string           `json:"domain,omitempty"` // "": the rule applies to every domain
	Param           string           `json:"param"`
	Grade           string           `json:"grade"`
	Count           int64            `json:"count"`
	Duration        string           `json:"duration,omitempty"`
	Burst           int64            `json:"burst,omitempty"`
	Behavior        string           `json:"behavior,omitempty"`
	MaxQueueingTime string           `json:"max_queueing_time,omitempty"`
	Items           map[string]int64 `json:"items,omitempty"`
	Lease           string           `json:"lease,omitempty"`
	Capacity        int              `json:"capacity,omitempty"`
	StateBudget     string           `json:"state_budget,omitempty"` // "": the service's hot_param.rule_state_budget
	Overflow        string           `json:"overflow,omitempty"`     // "": the service's hot_param.overflow
	Refund          bool             `json:"refund"`
	Charge          string           `json:"charge,omitempty"` // "postpaid", or "" (prepaid)
	Cluster         bool             `json:"cluster"`
	Shadow          bool             `json:"shadow"`
	Match           string           `json:"match,omitempty"` // e.g. `prefix: "vip-"`
}

// AuthorityOf renders r as the rules file spells it, its missing-origin default made explicit.
func AuthorityOf(r authority.Rule) AuthorityJSON {
	// The default for a request without an origin: deny for a white list, allow for a black one.
	missing := r.MissingOrigin
	if missing == authority.MissingDefault {
		missing = authority.MissingDeny
		if r.Strategy == authority.Black {
			missing = authority.MissingAllow
		}
	}
	v := AuthorityJSON{
		Resource:      r.Resource,
		Strategy:      r.Strategy.String(),
		Origins:       r.Origins,
		MissingOrigin: missing.String(),
		Shadow:        r.Shadow,
		Literal:       r.Literal,
	}
	if v.Origins == nil {
		v.Origins = []string{}
	}
	return v
}

// ParamFlowOf renders r as the rules file spells it.
func ParamFlowOf(r hotparam.Rule) ParamFlowJSON {
	v := ParamFlowJSON{
		Resource:    r.Resource,
		Domain:      r.Domain,
		Param:       r.Param,
		Count:       r.Count,
		Items:       r.Items,
		Capacity:    r.Capacity,
		Refund:      r.Refund,
		StateBudget: sizeString(r.StateBudget),
		Overflow:    r.Overflow.String(),
		Cluster:     r.Cluster,
		Shadow:      r.Shadow,
	}
	if m, ok := r.Match.(fmt.Stringer); ok {
		v.Match = m.String()
	}
	v.Grade = r.Grade.String()
	if r.Grade == hotparam.Concurrency {
		v.Lease = durationString(r.Lease)
		return v
	}
	v.Lease = durationString(r.Lease) // a refund rule's lease; empty otherwise
	v.Duration = durationString(r.Duration)
	v.Burst = r.Burst
	v.Behavior = r.Behavior.String()
	if r.Postpaid {
		v.Charge = "postpaid"
	}
	if r.Behavior == hotparam.Throttle {
		v.MaxQueueingTime = r.MaxQueueingTime.String()
	}
	return v
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// sizeString spells n bytes as a rules file may: in the largest binary unit that divides it.
func sizeString(n int64) string {
	if n <= 0 {
		return ""
	}
	for _, u := range []struct {
		unit  string
		bytes int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.bytes == 0 {
			return fmt.Sprintf("%d%s", n/u.bytes, u.unit)
		}
	}
	return fmt.Sprintf("%dB", n)
}
