// Package authority decides whether a caller (an origin) may reach a resource, by per-resource
// white and black lists of names, IP addresses and CIDR ranges.
package authority

// Strategy says whether a rule's origins are the only ones let through (White) or the ones kept
// out (Black).
type Strategy uint8

const (
	White Strategy = iota
	Black
)

// MissingOrigin says what a rule does with a request that has no origin.
type MissingOrigin uint8

const (
	// MissingDefault denies for a white list and allows for a black list.
	MissingDefault MissingOrigin = iota
	MissingDeny
	MissingAllow
)

// Rule is one white or black list for one resource.
type Rule struct {
	Resource      string
	Strategy      Strategy
	Origins       []string // exact names; IP addresses and CIDRs match an origin that is an IP
	MissingOrigin MissingOrigin
}

// List is a compiled, immutable set of rules. It is safe for concurrent use. The zero value and
// a nil *List allow everything.
type List struct {
	rules []Rule
}

// New compiles rules. It returns an error for an origin that looks like an IP or CIDR but is not
// a valid one.
func New(rules []Rule) (*List, error) {
	panic("TODO")
}

// Check reports whether origin may reach resource. An empty origin is a missing one. When it may
// not, rule is the index (in the slice given to New) of the first rule that blocks; otherwise -1.
func (l *List) Check(resource, origin string) (rule int, ok bool) {
	panic("TODO")
}

// Rules returns the rules the list was compiled from. The caller must not modify them.
func (l *List) Rules() []Rule {
	if l == nil {
		return nil
	}
	return l.rules
}
