package rulestore

import (
	"fmt"
	"sort"
	"strings"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
)

// The checks of the rules against the service's mapping config (what each rule needs of a
// request, and whether the mapping gives it) are all here, made for every dialect once it has
// decoded its rules.

// crossCheck adds the warnings about rules that the service's mapping config leaves
// without the input they need (when ParseOptions.Mapping is set), and about rules that
// contradict each other:
//   - authority rules while no authz.origin source is configured: every Check then has no
//     origin (white lists deny it, black lists let it through);
//   - concurrency and refund rules: they act only on rate-limit calls that carry the lease key
//     (ratelimit.lease_key), on the acquire and on the release;
//   - params no authz.params source produces (one warning for all): Check calls never carry
//     them, only rate-limit descriptors with those keys;
//   - white and black rules on one resource, and two lists of one kind on one resource (native
//     files; of Sentinel's, only the first rule of a resource is kept).
func crossCheck(p *decode.File, m *descriptors.Config) {
	rules := p
	if m != nil {
		if len(rules.Authority) > 0 && len(m.Authz.Origin) == 0 {
			p.Warn("", -1, "", fmt.Sprintf("%d authority rules, but no origin source is configured (authz.origin): every Check has no origin, so white lists deny it and black lists let it through; add e.g. authz.origin: [{from: header, name: x-origin}]", len(rules.Authority)))
		}
		var leased []string
		for i, r := range rules.ParamFlow {
			if r.Grade == hotparam.Concurrency || r.Refund {
				leased = append(leased, fmt.Sprintf("%s[%d]", decode.SectionParamFlow, i))
			}
		}
		if len(leased) > 0 {
			key := m.RateLimit.LeaseKey
			if key == "" {
				key = "lease_id"
			}
			p.Warn("", -1, "", fmt.Sprintf("concurrency and refund rules (%s) act only on rate-limit calls that carry the lease key %q (ratelimit.lease_key) on the acquire and on the release: make Envoy's rate-limit actions send the request's x-request-id under it, or these rules release nothing", strings.Join(leased, ", "), key))
		}
		seen := map[string]bool{}
		var unmapped []string
		for i, r := range rules.ParamFlow {
			if _, ok := m.Authz.Params[r.Param]; ok || seen[r.Param] {
				continue
			}
			seen[r.Param] = true
			if _, hinted := p.Sources[r.Param]; hinted {
				continue // sourceNotes says what to add
			}
			unmapped = append(unmapped, fmt.Sprintf("%q (%s[%d])", r.Param, decode.SectionParamFlow, i))
		}
		if len(unmapped) > 0 {
			p.Warn("", -1, "", fmt.Sprintf("no authz.params source produces the params %s: Check calls never carry them, only rate-limit descriptors with these keys do", strings.Join(unmapped, ", ")))
		}
		for n := range p.Sources {
			if _, ok := m.Authz.Params[n]; ok {
				delete(p.Sources, n) // already mapped
			}
		}
	}
	strategies := map[string][2]bool{}
	lists := map[string][2]int{}
	for _, r := range rules.Authority {
		s := strategies[r.Resource]
		s[r.Strategy] = true
		strategies[r.Resource] = s
		if !r.Literal && r.Strategy <= authority.Black {
			n := lists[r.Resource]
			n[r.Strategy]++
			lists[r.Resource] = n
		}
	}
	var repeated []string
	for res, n := range lists {
		if n[authority.White] > 1 || n[authority.Black] > 1 {
			repeated = append(repeated, res)
		}
	}
	sort.Strings(repeated)
	for _, res := range repeated {
		p.Warn(decode.SectionAuthority, -1, res, "several lists of one kind on one resource: every rule applies (an origin must be on every white list and on no black list), so two white lists let through only the origins on both; Sentinel would keep only the first rule of the resource")
	}
	var both []string
	for res, s := range strategies {
		if s[authority.White] && s[authority.Black] {
			both = append(both, res)
		}
	}
	sort.Strings(both)
	for _, res := range both {
		p.Warn(decode.SectionAuthority, -1, res, "white and black rules on one resource: an origin must be on every white list and on no black list; one kind of list is usually meant")
	}
	sourceNotes(p)
}

// sourceNotes are the warnings for the params the file's rules read from sources the service's
// mapping config must provide (File.NeedSource), sorted by param.
func sourceNotes(p *decode.File) {
	names := make([]string, 0, len(p.Sources))
	for n := range p.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p.Warn("", -1, "", fmt.Sprintf("param %q needs a mapping source, which a rules file cannot add: add authz.params.%s: %s to the service config (and send it as the rate-limit descriptor key %q)", n, n, p.Sources[n], n))
	}
}

// Uses answers descriptors.Uses from the rules in force (Current, the Store's), so that a
// mapping source over a limit refuses only the requests whose rules read it. It scans the
// rules, and is called only for a source over a limit. Without rules (Current returns nil)
// every source counts as used.
type Uses struct {
	Current func() *Set
}

var _ descriptors.Uses = Uses{}

// UsesOrigin reports whether an authority rule on resource is in force.
func (u Uses) UsesOrigin(resource string) bool {
	s := u.Current()
	if s == nil {
		return true
	}
	for _, r := range s.Rules.Authority {
		if r.Resource == resource {
			return true
		}
	}
	return false
}

// UsesParam reports whether a param-flow rule on resource that reads param is in force.
func (u Uses) UsesParam(resource, param string) bool {
	s := u.Current()
	if s == nil {
		return true
	}
	for _, r := range s.Rules.ParamFlow {
		if r.Resource == resource && r.Param == param {
			return true
		}
	}
	return false
}
