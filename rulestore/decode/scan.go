package decode

import (
	"encoding/json"
	"errors"
	"fmt"
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

// Members splits a valid JSON object into its members, in order, keeping duplicates. A
// member named like a field of a registered document gets that field's name string.
func (g *Registry) Members(raw []byte) ([]Member, error) { return g.scanMembersInto(nil, raw) }

// scanMembersInto is Members appending to ms.
func (g *Registry) scanMembersInto(ms []Member, raw []byte) ([]Member, error) {
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
			name, known = g.name(raw[i+1 : end-1])
		}
		if !known {
			name = jsonString(raw[i:end], esc)
			if !esc {
				g.keep(name)
			}
		}
		i = skipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return ms, errNotObject
		}
		i = skipSpace(raw, i+1)
		vend := skipValue(raw, i)
		ms = append(ms, Member{Name: name, Value: raw[i:vend:vend]})
		i = skipSpace(raw, vend)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return ms, nil
}

// Elements splits a valid JSON array into its elements.
func Elements(raw []byte) ([]json.RawMessage, error) {
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

// scanMembers is Members without a Registry: no field names are shared.
func scanMembers(raw []byte) ([]Member, error) { return (*Registry)(nil).scanMembersInto(nil, raw) }

// CheckDuplicates reports the first object key given twice anywhere in raw (encoding/json would
// silently keep the last one). raw must be valid JSON; it is read in one pass, and the keys of
// the objects open at one time are kept in one list (a set only for objects with many keys).
func CheckDuplicates(raw []byte) error {
	type frame struct {
		object, wantKey bool
		from            int                 // where the object's keys start in keys
		set             map[string]struct{} // its keys, once it has many
	}
	var stack []frame
	var keys []string
	const small = 16
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			end, esc := skipString(raw, i)
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
				top := &stack[n-1]
				top.wantKey = false
				key := jsonString(raw[i:end], esc)
				dup := false
				if top.set != nil {
					_, dup = top.set[key]
					top.set[key] = struct{}{}
				} else {
					for _, k := range keys[top.from:] {
						if k == key {
							dup = true
							break
						}
					}
					keys = append(keys, key)
					if len(keys)-top.from > small {
						top.set = make(map[string]struct{}, 2*small)
						for _, k := range keys[top.from:] {
							top.set[k] = struct{}{}
						}
						keys = keys[:top.from]
					}
				}
				if dup {
					return fmt.Errorf("cannot parse JSON: key %q given twice in one object", key)
				}
			}
			i = end - 1
		case '{':
			stack = append(stack, frame{object: true, wantKey: true, from: len(keys)})
		case '[':
			stack = append(stack, frame{from: len(keys)})
		case '}', ']':
			if n := len(stack); n > 0 {
				keys = keys[:stack[n-1].from]
				stack = stack[:n-1]
			}
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].wantKey = true
			}
		}
	}
	return nil
}
