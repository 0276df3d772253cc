package config

import (
	"fmt"
	"strings"
)

// FieldError is one invalid setting.
type FieldError struct {
	Field  string // the key, as in the file: "store.redis.mode"
	Reason string // what is wrong, with the value given and, when one is close, a suggestion
	// From says where the value came from (the config file, an environment variable, a flag);
	// "" for a built-in default or a problem no single source caused.
	From string
}

func (e *FieldError) Error() string {
	if e.From == "" {
		return e.Field + ": " + e.Reason
	}
	return e.Field + ": " + e.Reason + " (from " + e.From + ")"
}

// Errors is every problem of a configuration, found in one pass.
type Errors []*FieldError

func (e Errors) Error() string {
	if len(e) == 1 {
		return "invalid config: " + e[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid config: %d problems:", len(e))
	for _, fe := range e {
		b.WriteString("\n  ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Unwrap returns each problem, for errors.As.
func (e Errors) Unwrap() []error {
	out := make([]error, len(e))
	for i, fe := range e {
		out[i] = fe
	}
	return out
}

// suggest returns ` (did you mean "x"?)` for the known name closest to name, or "" when none
// is close.
func suggest(name string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
