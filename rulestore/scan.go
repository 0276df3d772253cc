package rulestore

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"unicode/utf8"
)

// The scanners below split JSON that is already known to be valid (every input has been
// checked by encoding/json or produced by the YAML conversion) without copying: the values
// they return are slices of their input. They replace encoding/json's Decoder, whose token
// API allocates for every token, on the path a large rules file takes.

var errNotArray = errors.New("not a list")

// skipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] == '"', and whether it
// holds an escape.
func skipString(b []byte, i int) (int, bool) {
	escaped := false
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			return i + 1, escaped
		}
	}
	return len(b), escaped
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		end, _ := skipString(b, i)
		return end
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i, _ = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// jsonString decodes the JSON string s (quotes included); without escapes it is one copy.
// Invalid UTF-8 is decoded as encoding/json does (each bad byte becomes U+FFFD).
func jsonString(s []byte, escaped bool) string {
	if !escaped && len(s) >= 2 && utf8.Valid(s) {
		return string(s[1 : len(s)-1])
	}
	var v string
	_ = json.Unmarshal(s, &v)
	return v
}

// scanMembers splits a valid JSON object into its members, in order.
func scanMembers(raw []byte) ([]member, error) { return scanMembersInto(nil, raw) }

// scanMembersInto is scanMembers appending to ms.
func scanMembersInto(ms []member, raw []byte) ([]member, error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return ms, errNotObject
	}
	for i = skipSpace(raw, i+1); i < len(raw) && raw[i] != '}'; {
		if raw[i] != '"' {
			return ms, errNotObject
		}
		end, esc := skipString(raw, i)
		name, known := "", false
		if !esc {
			name, known = fieldNames[string(raw[i+1:end-1])] // no allocation for the lookup
		}
		if !known {
			name = jsonString(raw[i:end], esc)
		}
		i = skipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return ms, errNotObject
		}
		i = skipSpace(raw, i+1)
		vend := skipValue(raw, i)
		ms = append(ms, member{name: name, value: raw[i:vend:vend]})
		i = skipSpace(raw, vend)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return ms, nil
}

// scanElements splits a valid JSON array into its elements.
func scanElements(raw []byte) ([]json.RawMessage, error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, errNotArray
	}
	var out []json.RawMessage
	if len(raw) >= 1<<16 {
		// A long list (the rules of a large file) is counted first, to be split into a slice of
		// its exact size: counting costs less than growing the slice.
		n := 0
		for j := skipSpace(raw, i+1); j < len(raw) && raw[j] != ']'; n++ {
			end := skipValue(raw, j)
			if end == j {
				return nil, errNotArray
			}
			j = skipSpace(raw, end)
			if j < len(raw) && raw[j] == ',' {
				j = skipSpace(raw, j+1)
			}
		}
		out = make([]json.RawMessage, 0, n)
	}
	for i = skipSpace(raw, i+1); i < len(raw) && raw[i] != ']'; {
		end := skipValue(raw, i)
		if end == i {
			return nil, errNotArray
		}
		if len(out) == cap(out) && len(out) >= 256 {
			// Double: append grows a large slice by a quarter at a time, allocating about five
			// times the final size over a list of 50,000 rules.
			out = append(make([]json.RawMessage, 0, 2*cap(out)), out...)
		}
		out = append(out, raw[i:end:end])
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return out, nil
}

// fieldNames holds the field names of the rule documents, so that scanMembers gives a member
// whose name is one of them that string, instead of a copy per rule of the file.
var fieldNames = func() map[string]string {
	names := map[string]string{}
	for _, doc := range []any{
		nativeFile{}, authorityDoc{}, paramFlowDoc{}, itemDoc{}, matchDoc{},
		sentinelFile{}, sentinelParamDoc{}, sentinelItemDoc{}, sentinelClusterDoc{}, sentinelAuthorityDoc{},
		goHotspotDoc{}, goSpecificValue{}, gatewayDoc{}, gatewayItemDoc{}, apiDoc{}, apiPredicateDoc{},
	} {
		t := reflect.TypeOf(doc)
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
				names[name] = name
			}
		}
	}
	return names
}()
