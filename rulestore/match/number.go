package match

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Sentinel's exception items are typed: ParamFlowRuleUtil parses each item's object by its
// classType, and compares the application's argument with the parsed value, so 007 and 7 are
// one int. Requests reach extauthz as text; a rule whose items are numbers compares the values
// of its param as numbers too (Number), so that no respelling of a number gets a bucket of its
// own or escapes the number's exception.

// ItemClass is how Sentinel's parseItemValue reads an item of a classType: exactly the
// primitive names and the java.lang boxed names it tests for; any other spelling (Integer,
// java.lang.Character, ...) is read as a String.
func ItemClass(classType string) (kind string, bits int) {
	switch classType {
	case "int", "java.lang.Integer":
		return "int", 32
	case "long", "java.lang.Long":
		return "int", 64
	case "short", "java.lang.Short":
		return "int", 16
	case "byte", "java.lang.Byte":
		return "int", 8
	case "double", "java.lang.Double":
		return "float", 64
	case "float", "java.lang.Float":
		return "float", 32
	case "boolean", "java.lang.Boolean":
		return "bool", 0
	case "char":
		return "char", 0
	}
	return "string", 0
}

// Number is the Matcher of an imported param-flow rule whose exception items are numbers. It
// limits every value, and keeps each value that reads as a number of its kind (as Java's
// valueOf reads it) under the number's canonical text: 007, +7 and 7 share one bucket and one
// exception item. A value that is no such number keeps its own text. It is safe for
// concurrent use.
type Number struct {
	Kind string // "int" or "float"
	Bits int    // 8, 16, 32 or 64 ("int"); 32 or 64 ("float")
}

// Match reports true: a typed rule limits every value.
func (n *Number) Match(string) bool { return true }

// Key is value's canonical text when it reads as a number, else value.
func (n *Number) Key(value string) string {
	if k, ok := n.Canonical(value); ok {
		return k
	}
	return value
}

// String is the matcher as the native format writes it: number: "int".
func (n *Number) String() string { return "number: " + strconv.Quote(n.Class()) }

// Class is the Java type the values are read as: int, long, short, byte, double or float.
func (n *Number) Class() string {
	switch {
	case n.Kind == "float" && n.Bits == 32:
		return "float"
	case n.Kind == "float":
		return "double"
	case n.Bits == 8:
		return "byte"
	case n.Bits == 16:
		return "short"
	case n.Bits == 32:
		return "int"
	}
	return "long"
}

// NewNumber is the Number of a Java numeric type (int, long, short, byte, double or float, or
// their java.lang names); ok is false for any other.
func NewNumber(class string) (n *Number, ok bool) {
	kind, bits := ItemClass(class)
	if kind != "int" && kind != "float" {
		return nil, false
	}
	return &Number{Kind: kind, Bits: bits}, true
}

// KeyItems rewrites a native rule's items under their keys (Key: a number's canonical text; any
// other value its own); two items that are one number are reported through add, for the field
// items.
func (n *Number) KeyItems(items map[string]int64, add func(field, format string, args ...any)) map[string]int64 {
	if len(items) == 0 {
		return items
	}
	out := make(map[string]int64, len(items))
	from := make(map[string]string, len(items))
	values := make([]string, 0, len(items))
	for v := range items {
		values = append(values, v)
	}
	slices.Sort(values)
	for _, v := range values {
		k := n.Key(v)
		if prev, dup := from[k]; dup {
			add("items", "%q and %q are one number (%s)", prev, v, k)
			continue
		}
		from[k] = v
		out[k] = items[v]
	}
	return out
}

// Canonical is v's canonical text, and whether v reads as a number of n's kind.
func (n *Number) Canonical(v string) (string, bool) {
	if n.Kind == "int" {
		i, ok := javaInt(v, n.Bits)
		return strconv.FormatInt(i, 10), ok
	}
	f, ok := javaFloat(v, n.Bits)
	return strconv.FormatFloat(f, 'g', -1, n.Bits), ok
}

// javaInt reads s as Java's Long.parseLong (or parseInt, ...) does: an optional sign, then
// decimal digits of any script in the Basic Multilingual Plane, within bits.
func javaInt(s string, bits int) (int64, bool) {
	if s == "" || len(s) > 256 {
		return 0, false
	}
	neg := false
	switch s[0] {
	case '-':
		neg, s = true, s[1:]
	case '+':
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	limit := uint64(1) << (bits - 1) // the magnitude of the smallest value
	var n uint64
	for _, r := range s {
		d, ok := digit(r)
		if !ok {
			return 0, false
		}
		n = n*10 + uint64(d)
		if n > limit {
			return 0, false
		}
	}
	if !neg && n == limit {
		return 0, false
	}
	if neg {
		return -int64(n), true
	}
	return int64(n), true
}

// digit is the value of a decimal digit as Java's Character.digit(char, 10) reads it: any
// Unicode decimal digit of the Basic Multilingual Plane (they come in runs of ten, from zero).
func digit(r rune) (int, bool) {
	if r > 0xFFFF || !unicode.Is(unicode.Nd, r) {
		return 0, false
	}
	k := 0
	for k < 9 && unicode.Is(unicode.Nd, r-rune(k)-1) {
		k++
	}
	return k % 10, true
}

// javaFloat reads s as Java's Double.parseDouble (or Float.parseFloat) does, for the forms
// requests carry: surrounding blanks and control characters trimmed, an optional f, F, d or D
// suffix. Hexadecimal and special forms are read as Go reads them.
func javaFloat(s string, bits int) (float64, bool) {
	s = strings.TrimFunc(s, func(r rune) bool { return r <= ' ' })
	if len(s) > 256 {
		return 0, false
	}
	if n := len(s); n > 1 && strings.ContainsRune("fFdD", rune(s[n-1])) && !strings.HasPrefix(strings.TrimLeft(s, "+-"), "0x") {
		s = s[:n-1]
	}
	if strings.ContainsRune(s, '_') {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, bits)
	return f, err == nil
}
