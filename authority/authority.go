// Package authority decides whether a caller (an origin) may reach a resource, by per-resource
// white and black lists of names, IP addresses and CIDR ranges.
package authority

import (
	"fmt"
	"net/netip"
)

// Strategy says whether a rule's origins are the only ones let through (White) or the ones kept
// out (Black).
type Strategy uint8

const (
	White Strategy = iota
	Black
)

// ParseStrategy parses "white" or "black".
func ParseStrategy(s string) (Strategy, error) {
	switch s {
	case "white":
		return White, nil
	case "black":
		return Black, nil
	}
	return 0, fmt.Errorf("unknown strategy %q: want white or black", s)
}

// String returns "white" or "black", or "Strategy(n)" for a value outside the two.
func (s Strategy) String() string {
	switch s {
	case White:
		return "white"
	case Black:
		return "black"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// MarshalText encodes s as its String, and fails for a value outside White and Black.
func (s Strategy) MarshalText() ([]byte, error) {
	if s > Black {
		return nil, fmt.Errorf("invalid strategy %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes text as ParseStrategy does.
func (s *Strategy) UnmarshalText(text []byte) error {
	v, err := ParseStrategy(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MissingOrigin says what a rule does with a request that has no origin.
type MissingOrigin uint8

const (
	// MissingDefault denies for a white list and allows for a black list.
	MissingDefault MissingOrigin = iota
	MissingDeny
	MissingAllow
)

// ParseMissingOrigin parses "" (or "default") as MissingDefault, "deny" and "allow".
func ParseMissingOrigin(s string) (MissingOrigin, error) {
	switch s {
	case "", "default":
		return MissingDefault, nil
	case "deny":
		return MissingDeny, nil
	case "allow":
		return MissingAllow, nil
	}
	return 0, fmt.Errorf("unknown missing_origin %q: want deny, allow or empty for the default", s)
}

// String returns "default", "deny" or "allow", or "MissingOrigin(n)" for another value.
func (m MissingOrigin) String() string {
	switch m {
	case MissingDefault:
		return "default"
	case MissingDeny:
		return "deny"
	case MissingAllow:
		return "allow"
	}
	return fmt.Sprintf("MissingOrigin(%d)", uint8(m))
}

// MarshalText encodes m as its String, and fails for an unknown value.
func (m MissingOrigin) MarshalText() ([]byte, error) {
	if m > MissingAllow {
		return nil, fmt.Errorf("invalid missing origin %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText decodes text as ParseMissingOrigin does.
func (m *MissingOrigin) UnmarshalText(text []byte) error {
	v, err := ParseMissingOrigin(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// allows reports whether a rule of strategy s lets a request without an origin through.
func (m MissingOrigin) allows(s Strategy) bool {
	switch m {
	case MissingDeny:
		return false
	case MissingAllow:
		return true
	}
	return s == Black
}

// Rule is one white or black list for one resource.
type Rule struct {
	Resource      string
	Strategy      Strategy
	Origins       []string // exact names; IP addresses and CIDRs match an origin that is an IP
	MissingOrigin MissingOrigin
	// Shadow rules are evaluated and reported (CheckShadow) but never block (Check skips them).
	Shadow bool
	// Literal rules compare every entry of Origins as an exact string, as Sentinel compares
	// the entries of limitApp: an entry written like an IP address or CIDR range matches only
	// an origin of the same text, and no entry is refused for its shape.
	Literal bool
}

// RuleError is a rule that New cannot compile.
type RuleError struct {
	Rule  int    // index in the slice given to New
	Field string // "resource", "strategy", "missing_origin" or "origins"
	Entry int    // index in Origins when Field is "origins"; -1 otherwise
	Err   error  // the reason; an *OriginError for a bad origin entry
}

func (e *RuleError) Error() string {
	if e.Entry >= 0 {
		return fmt.Sprintf("authority rule %d: %s[%d]: %v", e.Rule, e.Field, e.Entry, e.Err)
	}
	return fmt.Sprintf("authority rule %d: %s: %v", e.Rule, e.Field, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }

// List is a compiled, immutable set of rules. It is safe for concurrent use. The zero value and
// a nil *List allow everything.
type List struct {
	rules      []Rule
	byResource map[string][]compiled // the rules of each resource, in the order given to New
	shadows    bool                  // some rule is a shadow rule
}

// compiled is one rule ready for Check.
type compiled struct {
	index        int // in the slice given to New
	shadow       bool
	white        bool
	allowMissing bool
	names        map[string]struct{} // entries that are not IPs; nil when none
	ips          *ipSet              // IP and CIDR entries; nil when none
}

// New compiles rules. It returns an error for an origin that looks like an IP or CIDR but is not
// a valid one.
//
// Every rule of a resource must let a request through. A name entry matches an origin equal to
// it, byte for byte. An entry that LooksLikeIP is an address or CIDR range matching an origin
// that parses as an IP address inside it; IPv4 and IPv6 are separate families, and an
// IPv4-mapped IPv6 origin or entry counts as IPv4; in a Literal rule every entry is a name. The
// error is a *RuleError naming the rule and the entry: an empty resource or origin entry, an
// unknown strategy or missing-origin value, or an invalid IP or CIDR (see ValidateOrigin). New
// copies rules; later changes to them have no effect on the List.
func New(rules []Rule) (*List, error) {
	l := &List{rules: make([]Rule, len(rules))}
	for i, r := range rules {
		c, err := compile(i, r)
		if err != nil {
			return nil, err
		}
		r.Origins = append([]string(nil), r.Origins...)
		l.rules[i] = r
		l.shadows = l.shadows || r.Shadow
		if l.byResource == nil {
			l.byResource = make(map[string][]compiled)
		}
		l.byResource[r.Resource] = append(l.byResource[r.Resource], c)
	}
	return l, nil
}

func compile(i int, r Rule) (compiled, error) {
	fail := func(field string, entry int, err error) (compiled, error) {
		return compiled{}, &RuleError{Rule: i, Field: field, Entry: entry, Err: err}
	}
	if r.Resource == "" {
		return fail("resource", -1, fmt.Errorf("empty resource"))
	}
	if r.Strategy > Black {
		return fail("strategy", -1, fmt.Errorf("unknown strategy %d: want White or Black", uint8(r.Strategy)))
	}
	if r.MissingOrigin > MissingAllow {
		return fail("missing_origin", -1, fmt.Errorf("unknown missing origin %d", uint8(r.MissingOrigin)))
	}
	c := compiled{
		index:        i,
		shadow:       r.Shadow,
		white:        r.Strategy == White,
		allowMissing: r.MissingOrigin.allows(r.Strategy),
	}
	var prefixes []netip.Prefix
	for j, o := range r.Origins {
		if r.Literal {
			if o == "" {
				return fail("origins", j, &OriginError{Reason: "empty origin entry (a missing origin is handled by missing_origin)"})
			}
			if c.names == nil {
				c.names = make(map[string]struct{})
			}
			c.names[o] = struct{}{}
			continue
		}
		if err := ValidateOrigin(o); err != nil {
			return fail("origins", j, err)
		}
		if !LooksLikeIP(o) {
			if c.names == nil {
				c.names = make(map[string]struct{})
			}
			c.names[o] = struct{}{}
			continue
		}
		p, err := parseEntry(o)
		if err != nil {
			return fail("origins", j, err) // not reached: ValidateOrigin parsed o
		}
		prefixes = append(prefixes, p)
	}
	if len(prefixes) > 0 {
		c.ips = newIPSet(prefixes)
	}
	return c, nil
}

// Check reports whether origin may reach resource. An empty origin is a missing one. When it may
// not, rule is the index (in the slice given to New) of the first rule that blocks; otherwise -1.
// Shadow rules are left out: see CheckShadow.
//
// Check does not allocate. It parses origin as an IP address at most once, and only when a rule
// of the resource has IP or CIDR entries.
func (l *List) Check(resource, origin string) (rule int, ok bool) {
	if l == nil {
		return -1, true
	}
	return l.check(resource, origin, false)
}

// CheckShadow is Check over the shadow rules alone: blocked reports that a shadow rule of
// resource would have blocked origin, rule which (-1 when none would).
func (l *List) CheckShadow(resource, origin string) (rule int, blocked bool) {
	if l == nil || !l.shadows {
		return -1, false
	}
	rule, ok := l.check(resource, origin, true)
	return rule, !ok
}

// Names reports whether a rule (shadow rules included) names resource.
func (l *List) Names(resource string) bool {
	if l == nil {
		return false
	}
	_, ok := l.byResource[resource]
	return ok
}

// check runs the rules of resource whose shadow flag is shadow.
func (l *List) check(resource, origin string, shadow bool) (rule int, ok bool) {
	rs := l.byResource[resource]
	var addr netip.Addr
	parsed := false
	for i := range rs {
		c := &rs[i]
		if c.shadow != shadow {
			continue
		}
		if origin == "" {
			if !c.allowMissing {
				return c.index, false
			}
			continue
		}
		_, matched := c.names[origin]
		if !matched && c.ips != nil {
			if !parsed {
				addr, parsed = parseOrigin(origin), true
			}
			matched = c.ips.contains(addr)
		}
		if matched != c.white {
			return c.index, false
		}
	}
	return -1, true
}

// Rules returns the rules the list was compiled from. The caller must not modify them.
func (l *List) Rules() []Rule {
	if l == nil {
		return nil
	}
	return l.rules
}
