package native

import (
	"encoding/json"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/match"
)

// matchDoc is a native rule's match field: exactly one of its keys.
type matchDoc struct {
	Exact    *string `json:"exact"`
	Prefix   *string `json:"prefix"`
	Regex    *string `json:"regex"`
	Contains *string `json:"contains"`
	Number   *string `json:"number"`
}

// match decodes a native rule's match field: a *match.Match, or a *match.Number for number.
func (p *parser) match(raw json.RawMessage, r *decode.Problems) hotparam.Matcher {
	var d matchDoc
	if !p.f.Strict(raw, &d, "match.", r.Add).OK() {
		return nil
	}
	if d.Number != nil {
		if d.Exact != nil || d.Prefix != nil || d.Regex != nil || d.Contains != nil {
			r.Add("match", "give exactly one of exact, prefix, regex, contains or number")
			return nil
		}
		n, ok := match.NewNumber(*d.Number)
		if !ok {
			r.Add("match.number", "unknown type %q (int, long, short, byte, double or float)", *d.Number)
			return nil
		}
		return n
	}
	var kind match.MatchKind
	var pattern string
	n := 0
	for _, c := range []struct {
		k match.MatchKind
		p *string
	}{{match.MatchExact, d.Exact}, {match.MatchPrefix, d.Prefix}, {match.MatchRegex, d.Regex}, {match.MatchContains, d.Contains}} {
		if c.p != nil {
			kind, pattern = c.k, *c.p
			n++
		}
	}
	if n != 1 {
		if len(r.Errs) == 0 {
			r.Add("match", "give exactly one of exact, prefix, regex or contains, got %d", n)
		}
		return nil
	}
	m, err := match.NewMatch(kind, pattern)
	if err != nil {
		r.Add("match."+kind.String(), "%v", err)
		return nil
	}
	return m
}
