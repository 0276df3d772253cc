package decode

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

// Problems collects the problems of one rule (or of the file's top level when Index is -1);
// the resource is filled in by Done, once it has been decoded. Its Add method is what Strict
// and Decode report through.
type Problems struct {
	File    string
	Section string
	Index   int
	Errs    Errors
	f       *File // told of the rule by Done, to number it; nil for the top level
}

// Add records a problem with field (the rule's own, or "" for the rule as a whole).
func (r *Problems) Add(field, format string, args ...any) {
	r.Errs = append(r.Errs, &ValidationError{
		File:    r.File,
		Section: r.Section,
		Index:   r.Index,
		Field:   field,
		Reason:  fmt.Sprintf(format, args...),
	})
}

// Failed reports whether r already has a problem with field (a decoding error), so that a
// second, less precise one is not added.
func (r *Problems) Failed(field string) bool {
	for _, e := range r.Errs {
		if e.Field == field {
			return true
		}
	}
	return false
}

// Done names resource in every problem found and appends them to dst.
func (r *Problems) Done(dst *Errors, resource string) {
	for _, e := range r.Errs {
		e.Resource = resource
	}
	if r.f != nil && r.Index >= 0 {
		r.f.numbers.done(r.Section, r.Index, len(r.Errs) > 0)
	}
	*dst = append(*dst, r.Errs...)
	r.Errs = nil
}
