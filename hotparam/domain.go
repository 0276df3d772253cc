package hotparam

import "slices"

// Rules scoped to a rate-limit domain (Rule.Domain) apply only to the calls of that domain
// (CheckOptions.Domain); the rules without a domain apply to every call. A Limiter whose rules
// have no domain keeps no scoped index, and its calls look their rules up as they always did.

// scopedIndex is the rule indices by resource of a Limiter some of whose rules have a domain.
type scopedIndex struct {
	// none holds the rules without a domain: those of a call without a domain, or of a domain
	// no rule names.
	none map[string][]int32
	// by holds, per domain, the resources its rules name, each with its rules and the
	// resource's rules without a domain, in the order of the set.
	by map[string]map[string][]int32
}

// scopeIndex indexes rules by domain and resource; nil when no rule has a domain.
func scopeIndex(rules []Rule) *scopedIndex {
	if !slices.ContainsFunc(rules, func(r Rule) bool { return r.Domain != "" }) {
		return nil
	}
	s := &scopedIndex{none: make(map[string][]int32), by: make(map[string]map[string][]int32)}
	for i := range rules {
		if r := &rules[i]; r.Domain == "" {
			s.none[r.Resource] = append(s.none[r.Resource], int32(i))
		}
	}
	for i := range rules {
		r := &rules[i]
		if r.Domain == "" {
			continue
		}
		m := s.by[r.Domain]
		if m == nil {
			m = make(map[string][]int32)
			s.by[r.Domain] = m
		}
		idx, ok := m[r.Resource]
		if !ok {
			idx = slices.Clone(s.none[r.Resource])
		}
		m[r.Resource] = append(idx, int32(i))
	}
	for _, m := range s.by {
		for _, idx := range m {
			slices.Sort(idx) // the set's order: a call's ops run entry by entry, rule by rule
		}
	}
	return s
}

// indexFor returns the rule indices by resource that a call of domain looks up: base, and in
// dom (nil when none) the resources whose list differs for that domain.
func (l *Limiter) indexFor(domain string) (base, dom map[string][]int32) {
	if l.scoped == nil {
		return l.byResource, nil
	}
	return l.scoped.none, l.scoped.by[domain]
}
