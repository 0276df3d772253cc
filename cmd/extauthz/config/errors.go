package config

import (
	"fmt"
	"strings"

	"github.com/extauthz/extauthz/internal/closest"
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
	if k, ok := closest.Name(name, known); ok {
		return fmt.Sprintf(" (did you mean %q?)", k)
	}
	return ""
}
