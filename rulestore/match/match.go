// Package match holds the matchers of param-flow rules that the rules formats share: a rule
// limited to the values that match a pattern (Match), and one whose values are numbers of a
// Java type, each kept under its canonical text (Number).
package match

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
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
