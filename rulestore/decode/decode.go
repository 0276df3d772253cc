// Package decode is the decoding layer the rules formats share: strict decoding of JSON (and
// of YAML, converted to JSON) into the document types each format registers (Registry), the
// field-addressed validation errors with did-you-mean (ValidationError, Problems), where a rule
// or field is in its file (Locator), and the checks every format makes of the rules it reads
// (File). It knows no format: each one registers its document types and reads its files
// through a File.
package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/internal/closest"
)

// Member is one key of a JSON object and its raw value, in file order.
type Member struct {
	Name  string
	Value json.RawMessage
}

var errNotObject = errors.New("not an object")

// IsNull reports whether raw is the JSON null (an empty YAML value) or absent.
func IsNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// Strict decodes the object raw into the struct *dst field by field, by exact json tag.
// Every unknown, duplicate or mistyped field is reported through add with prefix before its
// name; a null value counts as absent. It returns the fields that were given, or an empty set
// (OK() false) when raw is not an object at all (reported too).
func (g *Registry) Strict(raw json.RawMessage, dst any, prefix string, add func(field, format string, args ...any)) Fields {
	buf := g.memberList()
	defer g.putMemberList(buf)
	ms, err := g.scanMembersInto((*buf)[:0], raw)
	*buf = ms[:0]
	if err != nil {
		add(strings.TrimSuffix(prefix, "."), "must be a mapping of fields, got %s", Kind(raw))
		return Fields{}
	}
	return g.Decode(ms, dst, prefix, add)
}

// Decode is Strict for an object already split into members.
func (g *Registry) Decode(ms []Member, dst any, prefix string, add func(field, format string, args ...any)) Fields {
	v := reflect.ValueOf(dst).Elem()
	fi := g.fieldsOf(v.Type())
	given := Fields{fi: fi}
	for k, m := range ms {
		dup := false
		for _, prev := range ms[:k] {
			if prev.Name == m.Name {
				dup = true
				break
			}
		}
		if dup {
			add(prefix+m.Name, "duplicate field")
			continue
		}
		i, ok := fi.index[m.Name]
		if !ok {
			add(prefix+m.Name, "unknown field%s", Suggest(m.Name, fi.names()))
			continue
		}
		if IsNull(m.Value) {
			continue
		}
		if !setField(v.Field(i), m.Value) {
			if err := json.Unmarshal(m.Value, v.Field(i).Addr().Interface()); err != nil {
				add(prefix+m.Name, "%s", typeReason(err, v.Type().Field(i).Type, m.Value))
				continue
			}
		}
		given.bits |= 1 << i
	}
	return given
}

// Fields is the fields of a struct that a decoding was given (a null counts as absent).
type Fields struct {
	bits uint64
	fi   *fieldInfo // nil when the value was not an object
}

// OK reports whether the value decoded was an object.
func (f Fields) OK() bool { return f.fi != nil }

// Has reports whether field name was given.
func (f Fields) Has(name string) bool {
	if f.fi == nil {
		return false
	}
	i, ok := f.fi.index[name]
	return ok && f.bits&(1<<i) != 0
}

// fieldInfo is a struct type's fields by json name.
type fieldInfo struct {
	t     reflect.Type
	index map[string]int
}

// names are the fields' names in the order of the struct (for messages).
func (fi *fieldInfo) names() []string {
	names := make([]string, fi.t.NumField())
	for i := range names {
		names[i] = jsonName(fi.t.Field(i))
	}
	return names
}

var (
	rawType    = reflect.TypeFor[json.RawMessage]()
	rawsType   = reflect.TypeFor[[]json.RawMessage]()
	scalarType = reflect.TypeFor[Scalar]()
)

// setField decodes the valid JSON value raw into f without encoding/json for the common kinds;
// it returns false, having changed nothing, when raw is not of f's kind (or f is of another
// kind), leaving the work and the error message to encoding/json.
func setField(f reflect.Value, raw []byte) bool {
	switch t := f.Type(); {
	case t == rawType:
		f.SetBytes(raw)
		return true
	case t == rawsType:
		elems, err := Elements(raw)
		if err != nil {
			return false
		}
		f.Set(reflect.ValueOf(elems))
		return true
	case t == scalarType:
		var sc Scalar
		if sc.UnmarshalJSON(raw) != nil {
			return false
		}
		f.Set(reflect.ValueOf(sc))
		return true
	}
	switch f.Kind() {
	case reflect.String:
		if raw[0] != '"' {
			return false
		}
		end, esc := skipString(raw, 0)
		f.SetString(jsonString(raw[:end], esc))
		return true
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || f.OverflowInt(n) {
			return false
		}
		f.SetInt(n)
		return true
	case reflect.Float64:
		if raw[0] == '"' || raw[0] == 't' || raw[0] == 'f' || raw[0] == '[' || raw[0] == '{' {
			return false
		}
		x, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return false
		}
		f.SetFloat(x)
		return true
	case reflect.Bool:
		switch string(raw) {
		case "true":
			f.SetBool(true)
			return true
		case "false":
			f.SetBool(false)
			return true
		}
	}
	return false
}

// Suggest returns ` (did you mean "x"?)` for the known name closest to name, if one is close,
// else the known names.
func Suggest(name string, known []string) string {
	if k, ok := closest.Name(name, known); ok {
		return fmt.Sprintf(" (did you mean %q?)", k)
	}
	return fmt.Sprintf(" (known fields: %s)", strings.Join(known, ", "))
}

// typeReason words a decoding error of one field whose Go type is t.
func typeReason(err error, t reflect.Type, raw json.RawMessage) string {
	var se scalarError
	if errors.As(err, &se) {
		return string(se)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	want := "a valid value"
	switch t.Kind() {
	case reflect.String:
		want = "a string"
	case reflect.Int, reflect.Int64:
		want = "a whole number"
	case reflect.Float64:
		want = "a number"
	case reflect.Bool:
		want = "true or false"
	case reflect.Slice:
		want = "a list"
	}
	return fmt.Sprintf("must be %s, got %s", want, Kind(raw))
}

// Kind describes a JSON value for messages: "a list", "a mapping", or the value itself when
// it is short.
func Kind(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "":
		return "nothing"
	case s[0] == '[':
		return "a list"
	case s[0] == '{':
		return "a mapping"
	case len(s) > 40:
		return s[:37] + "..."
	}
	return s
}

// Scalar is a string that may be written as a JSON number or boolean too; it is the text that
// matters. In YAML files a bare Scalar is refused (see File.Text): by the time it is seen, YAML
// has turned it into a number, whose text may differ from what was written.
type Scalar struct {
	Text string
	Bare bool // written as a number or a boolean, not a string
}

type scalarError string

func (e scalarError) Error() string { return string(e) }

// UnmarshalJSON accepts a string, a number or a boolean.
func (s *Scalar) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return scalarError("must be a string or a number")
	}
	switch b[0] {
	case '"':
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = Scalar{Text: v}
		return nil
	case '[', '{':
		return scalarError("must be a string or a number, got " + Kind(b))
	}
	*s = Scalar{Text: string(b), Bare: true} // a number, true or false: its text
	return nil
}

// Duration parses a Go duration string given for field; given reports whether it was given.
func Duration(text string, given bool, field string, add func(field, format string, args ...any)) (time.Duration, bool) {
	if !given {
		return 0, true
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		add(field, "must be a Go duration such as \"1s\" or \"500ms\", got %q", text)
		return 0, false
	}
	return d, true
}

// WholeNumber converts a float read from Sentinel's JSON to an int64, if it is whole and in
// range.
func WholeNumber(f float64) (int64, bool) {
	if f != f || f < -(1<<62) || f > 1<<62 || f != float64(int64(f)) {
		return 0, false
	}
	return int64(f), true
}

// RequiredWhole reads a required whole-number field of a Sentinel rule: 0, and its error on r,
// when it is missing or not whole; 0 alone when it already failed to decode.
func RequiredWhole(r *Problems, given Fields, field string, f float64) int64 {
	switch {
	case r.Failed(field):
		return 0
	case !given.Has(field):
		r.Add(field, "required")
		return 0
	}
	n, ok := WholeNumber(f)
	if !ok {
		r.Add(field, "must be a whole number, got %s", FormatNumber(f))
	}
	return n
}

// FormatNumber writes f without an exponent or trailing zeros.
func FormatNumber(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
