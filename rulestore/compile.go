package rulestore

import (
	"errors"
	"strings"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
)

// compiled is a rule set ready to be put in force.
type compiled struct {
	authority *authority.List
	paramFlow *hotparam.Limiter
}

// compileRules compiles parsed rules: the authority list, and the param-flow limiter (a reload
// of prev's, keeping the state of unchanged rules, when prev has one). This is the last step of
// validation, shared by Parse, Load (so by `extauthz validate`) and the Store: a rule the
// engines refuse (a count, burst and duration too large to count exactly, say) is an error
// addressed like any other, by file, line and column (where pos says), section, number and
// resource.
func compileRules(file string, rules Rules, pos positions, prev *Set, lim hotparam.Options) (compiled, error) {
	list, err := authority.New(rules.Authority)
	if err != nil {
		var re *authority.RuleError
		e := &decode.ValidationError{File: file, Section: decode.SectionAuthority, Index: -1, Reason: err.Error()}
		if errors.As(err, &re) && re.Rule >= 0 && re.Rule < len(rules.Authority) {
			e.Index = re.Rule
			e.Resource = rules.Authority[re.Rule].Resource
			e.Field = re.Field
			e.Reason = re.Err.Error()
			e.Line, e.Column = pos.where(decode.SectionAuthority, re.Rule, re.Field)
		}
		return compiled{}, decode.Errors{e}
	}
	var limiter *hotparam.Limiter
	if prev != nil && prev.ParamFlow != nil {
		limiter, err = prev.ParamFlow.Reload(rules.ParamFlow, lim)
	} else {
		limiter, err = hotparam.New(rules.ParamFlow, lim)
	}
	if err != nil {
		return compiled{}, paramFlowErrors(file, rules.ParamFlow, pos, lim, err)
	}
	return compiled{authority: list, paramFlow: limiter}, nil
}

// paramFlowErrors addresses err, the limiter's refusal of rules, to the rules that cause it:
// each rule is compiled alone (only on this failure path) to find them. A refusal no single rule
// explains (the shared store cannot hold the set, say) is reported for the section as a whole.
func paramFlowErrors(file string, rules []hotparam.Rule, pos positions, lim hotparam.Options, err error) error {
	alone := hotparam.Options{Replicas: lim.Replicas}
	var errs decode.Errors
	for i, r := range rules {
		r.Capacity = 1 // the smallest store: only the rule's thresholds are checked
		if _, e := hotparam.New([]hotparam.Rule{r}, alone); e != nil {
			line, col := pos.where(decode.SectionParamFlow, i, "")
			errs = append(errs, &decode.ValidationError{
				File: file, Line: line, Column: col, Section: decode.SectionParamFlow, Index: i, Resource: r.Resource,
				Reason: engineReason(e),
			})
		}
	}
	if len(errs) == 0 {
		errs = decode.Errors{{File: file, Section: decode.SectionParamFlow, Index: -1, Reason: "cannot compile: " + err.Error()}}
	}
	return errs
}

// engineReason is the limiter's message without its "hotparam: rule N (resource, param): "
// prefix, which the decode.ValidationError says in the file's terms.
func engineReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "): "); strings.HasPrefix(msg, "hotparam: rule ") && i >= 0 {
		return msg[i+3:]
	}
	return msg
}

// check parses data and compiles the result without keeping it: every check a load makes,
// short of the shared store's.
func check(file string, data []byte, opts ParseOptions) (Rules, error) {
	rules, _, err := checkPos(file, data, opts)
	return rules, err
}

// checkPos is check that also returns where each rule was in the file.
func checkPos(file string, data []byte, opts ParseOptions) (Rules, positions, error) {
	rules, pos, err := parse(file, data, opts)
	if err != nil {
		return Rules{}, positions{}, err
	}
	if _, err := compileRules(file, rules, pos, nil, hotparamOptions()); err != nil {
		return Rules{}, positions{}, err
	}
	return rules, pos, nil
}

// hotparamOptions are the limiter options of a check: no shared store.
func hotparamOptions() hotparam.Options { return hotparam.Options{} }
