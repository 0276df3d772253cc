package hotparam

import "maps"

// How a new generation of rules takes over the old one's state: which old rule each new rule
// continues, and what is retired.

// resourceIndex returns the indices of rules by resource: old's own index when every rule has
// the resource of the rule at its place in old (the index is never modified once built).
func resourceIndex(rules []Rule, old *Limiter) map[string][]int32 {
	if old != nil && len(old.rules) == len(rules) {
		same := true
		for i := range rules {
			if rules[i].Resource != old.rules[i].Resource {
				same = false
				break
			}
		}
		if same {
			return old.byResource
		}
	}
	idx := make(map[string][]int32, len(rules))
	for i := range rules {
		idx[rules[i].Resource] = append(idx[rules[i].Resource], int32(i))
	}
	return idx
}

// prior is a compiled rule of an earlier set with its Rule: one of old's, or a retired one.
type prior struct {
	rs   *ruleState
	rule *Rule
}

// match returns, for each rule, how many earlier rules share its identity (nth), and the
// compiled rule of old with the same identity and nth (from; none when there is none, or old
// is nil).
func match(rules []Rule, byResource map[string][]int32, old *Limiter) (nth []int32, from []prior) {
	nth = make([]int32, len(rules))
	from = make([]prior, len(rules))
	type key struct {
		id  identity
		nth int32
	}
	if len(byResource) == len(rules) {
		// One rule a resource: every nth is 0, and a rule matches old's rule of its resource,
		// found by one lookup (none when old's index is this one: no rule moved).
		for i := range rules {
			j := -1
			id := identityOf(&rules[i])
			switch {
			case old == nil:
			case len(old.byResource) == len(old.rules) && len(old.rules) == len(rules) && old.rules[i].Resource == rules[i].Resource:
				j = i
			default:
				// Each group of old is scanned once at most, as no two new rules share it.
				for _, k := range old.byResource[rules[i].Resource] {
					if old.compiled[k].nth == 0 && identityOf(&old.rules[k]) == id {
						j = int(k)
						break
					}
				}
			}
			if j >= 0 && identityOf(&old.rules[j]) == id {
				from[i] = prior{old.compiled[j], &old.rules[j]}
			}
		}
		return nth, from
	}
	for res, idx := range byResource {
		var was []int32
		if old != nil {
			was = old.byResource[res]
		}
		if len(idx) == 1 && len(was) <= 1 {
			if len(was) == 1 {
				if j := was[0]; identityOf(&old.rules[j]) == identityOf(&rules[idx[0]]) {
					from[idx[0]] = prior{old.compiled[j], &old.rules[j]}
				}
			}
			continue
		}
		seen := make(map[identity]int32, len(idx))
		for _, i := range idx {
			id := identityOf(&rules[i])
			nth[i] = seen[id]
			seen[id]++
		}
		if len(was) == 0 {
			continue
		}
		kept := make(map[key]prior, len(was))
		for _, j := range was {
			kept[key{identityOf(&old.rules[j]), old.compiled[j].nth}] = prior{old.compiled[j], &old.rules[j]}
		}
		for _, i := range idx {
			from[i] = kept[key{identityOf(&rules[i]), nth[i]}]
		}
	}
	return nth, from
}

// sameRule reports whether a and b compile alike. Rules with a Matcher are never the same (a
// Matcher may not be comparable).
func sameRule(a, b *Rule) bool {
	return a.Resource == b.Resource && a.Domain == b.Domain && a.Param == b.Param && a.Grade == b.Grade && a.Count == b.Count &&
		a.Duration == b.Duration && a.Burst == b.Burst && a.Behavior == b.Behavior &&
		a.MaxQueueingTime == b.MaxQueueingTime && a.Lease == b.Lease && a.Capacity == b.Capacity &&
		a.Refund == b.Refund && a.Postpaid == b.Postpaid && a.Cluster == b.Cluster && a.Shadow == b.Shadow &&
		a.StateBudget == b.StateBudget && a.Overflow == b.Overflow &&
		a.Match == nil && b.Match == nil && maps.Equal(a.Items, b.Items)
}

// A rule dropped by a reload (a source emptied by mistake, a rule deleted and put back) is
// retired: its state is kept, and swept as usual, so that a rule of the same identity and
// order that comes back takes it again instead of handing every value a fresh bucket. A
// retired rule is let go once Sweep has found its values back at their default (its store
// then tracks and parks nothing), that is, within its duration for a reject rule.

// retiredKey is what a retired rule is found again by.
type retiredKey struct {
	id  identity
	nth int32
}

// retiredRule is a retired rule with its Rule (the set it was compiled from is gone).
type retiredRule struct {
	rs   *ruleState
	rule Rule
}

// retiredFrom gives each rule that matched no rule of old the retired rule of old with its
// identity and order, if any.
func retiredFrom(rules []Rule, nth []int32, from []prior, old *Limiter) {
	if old == nil || len(old.retired) == 0 {
		return
	}
	byKey := make(map[retiredKey]*retiredRule, len(old.retired))
	for k := range old.retired {
		rr := &old.retired[k]
		byKey[retiredKey{identityOf(&rr.rule), rr.rs.nth}] = rr
	}
	for i := range rules {
		if from[i].rs == nil {
			if rr := byKey[retiredKey{identityOf(&rules[i]), nth[i]}]; rr != nil {
				from[i] = prior{rr.rs, &rr.rule}
			}
		}
	}
}

// retire returns the retired rules of a Limiter compiled from old: old's rules and retired
// rules whose stores no rule of compiled took, but for those whose stores are empty; of two of
// one identity and order, the one retired last.
func retire(compiled []*ruleState, old *Limiter) []retiredRule {
	if old == nil {
		return nil
	}
	taken := make(map[*store]bool, len(compiled))
	for _, rs := range compiled {
		taken[rs.store] = true
	}
	var out []retiredRule
	seen := make(map[retiredKey]bool)
	add := func(rs *ruleState, r *Rule) {
		k := retiredKey{identityOf(r), rs.nth}
		if taken[rs.store] || seen[k] || rs.store.idle() {
			return
		}
		seen[k] = true
		taken[rs.store] = true
		out = append(out, retiredRule{rs, *r})
	}
	for i, rs := range old.compiled {
		add(rs, &old.rules[i])
	}
	for i := range old.retired {
		add(old.retired[i].rs, &old.retired[i].rule)
	}
	return out
}
