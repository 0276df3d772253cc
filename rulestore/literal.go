package rulestore

import "fmt"

// literalOrigins checks the origin entries of a native rule with literal: true and returns them
// as written: each is compared with the request's origin as a string, as Sentinel compares the
// entries of limitApp, so an entry written like an address or range is a name, and spaces
// around an entry are part of it. Only an empty entry is refused.
func (p *parser) literalOrigins(r *ruleErrs, field string, in []scalar) []string {
	out := make([]string, 0, len(in))
	for j, o := range in {
		name := fmt.Sprintf("%s[%d]", field, j)
		s, ok := p.text(r, name, o)
		if !ok {
			continue
		}
		if s == "" {
			r.add(name, "must not be empty")
			continue
		}
		out = append(out, s)
	}
	return out
}
