package rulestore

import (
	"fmt"
	"strings"
)

// ValidationError is one problem in a rules file, addressed by file, rule and field.
type ValidationError struct {
	File     string
	Section  string // "authority" or "param_flow"
	Index    int    // -1 when the problem is not in one rule
	Resource string
	Field    string
	Reason   string
}

// Errors is every problem found in one file.
type Errors []*ValidationError

// Error formats the problem as "file: section[index] (resource "r"): field: reason", leaving
// out the parts that are empty (or, for Index, negative).
func (e *ValidationError) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
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
	*dst = append(*dst, r.errs...)
	r.errs = nil
}
