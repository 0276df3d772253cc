package rulestore

import (
	"fmt"
	"strings"
)

// ValidationError is one problem in a rules file, addressed by file, rule and field, and by
// line and column where the file's format says where the rule or field is.
type ValidationError struct {
	File string
	// Line and Column are where the field's key (or the rule, when the field is not in the file)
	// is, from 1; the column counts characters. 0 when not known.
	Line, Column int
	Section      string // "authority" or "param_flow" (or "api", a Sentinel API definition)
	// Index is the rule's number in its section: its place among the rules of that kind, as the
	// service numbers the rules in force (/rules, the bodies of refused calls, /check), counting
	// the rules in error as if they were kept. -1 when the problem is not in one rule, or is in a
	// rule that is ignored (it has no number in force; Line and Column say where it is).
	Index    int
	Resource string
	Field    string
	Reason   string
}

// Errors is every problem found in one file.
type Errors []*ValidationError

// Error formats the problem as "file:line:col: section[index] (resource "r"): field: reason",
// leaving out the parts that are empty (or, for Line and Index, not above 0 and negative).
func (e *ValidationError) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File != "" {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%d:%d", e.Line, e.Column)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Section != "" {
		b.WriteString(e.Section)
		if e.Index >= 0 {
			fmt.Fprintf(&b, "[%d]", e.Index)
		}
		if e.Resource != "" {
			fmt.Fprintf(&b, " (resource %q)", e.Resource)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Error lists every problem, one a line, in the order they were found.
func (e Errors) Error() string {
	if len(e) == 0 {
		return "no errors"
	}
	lines := make([]string, len(e))
	for i, v := range e {
		lines[i] = v.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, so that errors.As finds a *ValidationError.
func (e Errors) Unwrap() []error {
	errs := make([]error, len(e))
	for i, v := range e {
		errs[i] = v
	}
	return errs
}

// ruleErrs collects the problems of one rule (or of the file's top level when index is -1); the
// resource is filled in by done, once it has been decoded.
type ruleErrs struct {
	file    string
	section string
	index   int
	errs    Errors
	p       *parser // told of the rule by done, to number it; nil for the top level
}

func (r *ruleErrs) add(field, format string, args ...any) {
	r.errs = append(r.errs, &ValidationError{
		File:    r.file,
		Section: r.section,
		Index:   r.index,
		Field:   field,
		Reason:  fmt.Sprintf(format, args...),
	})
}

// done names resource in every problem found and appends them to dst.
func (r *ruleErrs) done(dst *Errors, resource string) {
	for _, e := range r.errs {
		e.Resource = resource
	}
	if r.p != nil && r.index >= 0 {
		r.p.numbers.done(r.section, r.index, len(r.errs) > 0)
	}
	*dst = append(*dst, r.errs...)
	r.errs = nil
}
