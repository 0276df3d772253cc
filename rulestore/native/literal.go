package native

import (
	"fmt"

	"github.com/extauthz/extauthz/rulestore/decode"
)

// literalOrigins checks the origin entries of a native rule with literal: true and returns them
// as written: each is compared with the request's origin as a string, as Sentinel compares the
// entries of limitApp, so an entry written like an address or range is a name, and spaces
// around an entry are part of it. Only an empty entry is refused.
func (p *parser) literalOrigins(r *decode.Problems, field string, in []decode.Scalar) []string {
	out := make([]string, 0, len(in))
	for j, o := range in {
		name := fmt.Sprintf("%s[%d]", field, j)
		s, ok := p.f.Text(r, name, o)
		if !ok {
			continue
		}
		if s == "" {
			r.Add(name, "must not be empty")
			continue
		}
		out = append(out, s)
	}
	return out
}
