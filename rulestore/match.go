package rulestore

import (
	"encoding/json"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"

	"github.com/extauthz/extauthz/hotparam"
)

// Limits of a regex match, so that compiling and running one stays cheap: RE2 runs in time
// linear in the value, and these bound the program it runs.
const (
	MaxRegexLen   = 1024 // bytes of pattern
	MaxRegexInsts = 4096 // instructions of the compiled program
)

// MatchKind is how a Match compares a value with its pattern.
type MatchKind uint8

const (
	MatchExact MatchKind = iota + 1
	MatchPrefix
	MatchRegex
	MatchContains
)

func (k MatchKind) String() string {
	switch k {
	case MatchExact:
		return "exact"
	case MatchPrefix:
		return "prefix"
	case MatchRegex:
		return "regex"
	case MatchContains:
		return "contains"
	}
	return "MatchKind(" + strconv.Itoa(int(k)) + ")"
}

// Match selects the values a param-flow rule limits (hotparam.Rule.Match): the others pass the
// rule untouched. A native regex is RE2 and matches anywhere in the value unless anchored with
// ^ and $; a Sentinel gateway rule's regex pattern is imported anchored at both ends, since
// Sentinel matches it against the whole value.
type Match struct {
	Kind    MatchKind
	Pattern string
	re      *regexp.Regexp
}

// NewMatch checks pattern for kind and returns the Match; a regex is compiled within the limits
// MaxRegexLen and MaxRegexInsts.
func NewMatch(kind MatchKind, pattern string) (*Match, error) {
	m := &Match{Kind: kind, Pattern: pattern}
	switch kind {
	case MatchExact, MatchPrefix, MatchContains:
		if pattern == "" {
			return nil, fmt.Errorf("the %s pattern must not be empty", kind)
		}
	case MatchRegex:
		if len(pattern) > MaxRegexLen {
			return nil, fmt.Errorf("the regex is %d bytes long, more than %d", len(pattern), MaxRegexLen)
		}
		re, err := syntax.Parse(pattern, syntax.Perl)
		if err != nil {
			return nil, fmt.Errorf("invalid regex (RE2 syntax): %v", err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			return nil, fmt.Errorf("invalid regex (RE2 syntax): %v", err)
		}
		if len(prog.Inst) > MaxRegexInsts {
			return nil, fmt.Errorf("the regex compiles to %d instructions, more than %d: simplify it (fewer repetitions)", len(prog.Inst), MaxRegexInsts)
		}
		if m.re, err = regexp.Compile(pattern); err != nil {
			return nil, fmt.Errorf("invalid regex (RE2 syntax): %v", err)
		}
	default:
		return nil, fmt.Errorf("unknown match kind %d", kind)
	}
	return m, nil
}

// Match reports whether the rule limits value.
func (m *Match) Match(value string) bool {
	switch m.Kind {
	case MatchExact:
		return value == m.Pattern
	case MatchPrefix:
		return strings.HasPrefix(value, m.Pattern)
	case MatchContains:
		return strings.Contains(value, m.Pattern)
	case MatchRegex:
		return m.re.MatchString(value)
	}
	return false
}

// String is the match as the native format writes it: "prefix: vip-".
func (m *Match) String() string { return m.Kind.String() + ": " + strconv.Quote(m.Pattern) }

// matchDoc is a native rule's match field: exactly one of its keys.
type matchDoc struct {
	Exact    *string `json:"exact"`
	Prefix   *string `json:"prefix"`
	Regex    *string `json:"regex"`
	Contains *string `json:"contains"`
	Number   *string `json:"number"`
}

// nativeMatch decodes a native rule's match field: a *Match, or a *Number for number.
func nativeMatch(raw json.RawMessage, r *ruleErrs) hotparam.Matcher {
	var d matchDoc
	if !decodeStrict(raw, &d, "match.", r.add).ok() {
		return nil
	}
	if d.Number != nil {
		if d.Exact != nil || d.Prefix != nil || d.Regex != nil || d.Contains != nil {
			r.add("match", "give exactly one of exact, prefix, regex, contains or number")
			return nil
		}
		n, ok := NewNumber(*d.Number)
		if !ok {
			r.add("match.number", "unknown type %q (int, long, short, byte, double or float)", *d.Number)
			return nil
		}
		return n
	}
	var kind MatchKind
	var pattern string
	n := 0
	for _, c := range []struct {
		k MatchKind
		p *string
	}{{MatchExact, d.Exact}, {MatchPrefix, d.Prefix}, {MatchRegex, d.Regex}, {MatchContains, d.Contains}} {
		if c.p != nil {
			kind, pattern = c.k, *c.p
			n++
		}
	}
	if n != 1 {
		if len(r.errs) == 0 {
			r.add("match", "give exactly one of exact, prefix, regex or contains, got %d", n)
		}
		return nil
	}
	m, err := NewMatch(kind, pattern)
	if err != nil {
		r.add("match."+kind.String(), "%v", err)
		return nil
	}
	return m
}
