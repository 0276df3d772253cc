package main

import "github.com/extauthz/extauthz/rulestore"

// ruleUses answers descriptors.Uses from the rules in force, so that a source over a mapping
// limit refuses only the requests whose rules read it. It scans the rules, and is called only
// for a source over a limit.
type ruleUses struct {
	current func() *rulestore.Set
}

func (u ruleUses) UsesOrigin(resource string) bool {
	s := u.current()
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

func (u ruleUses) UsesParam(resource, param string) bool {
	s := u.current()
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
