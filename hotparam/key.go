package hotparam

import (
	"encoding/binary"
	"strings"
	"unsafe"
)

// Keyer is implemented by a rule's Matcher that also says under which key a value is limited:
// values with one key share one state and one exception item (Items are looked up by key). A
// rule importing Sentinel's typed exception items uses it so that 007 and 7 are one number.
// Key must be safe for concurrent use and cheap: it runs for every value the rule matches.
type Keyer interface {
	Key(value string) string
}

// keyOf is the key value is limited under by a rule whose Matcher is m (not nil).
func keyOf(m Matcher, value string) string {
	if k, ok := m.(Keyer); ok {
		return k.Key(value)
	}
	return value
}

// longKey marks a vkey whose value is in the shard's longKeys.
const longKey = 0x80

// vkey is a slot's value: inline when it has at most shortKey bytes (its length in the last
// byte), else the position of its string in the shard's longKeys (in the first four bytes,
// longKey in the last). Its zero value is the empty value.
type vkey struct {
	b [shortKey + 1]byte
}

// longKeys holds a shard's values longer than shortKey, each its own string, by position;
// free lists the positions given back. Requires the shard's mu held.
type longKeys struct {
	s    []string
	free []uint32
}

// set makes k, the zero vkey or one released by clear, hold v, copying it (the caller's string
// may live in a reused buffer).
func (k *vkey) set(lk *longKeys, v string) {
	if len(v) <= shortKey {
		*k = vkey{}
		copy(k.b[:], v)
		k.b[shortKey] = uint8(len(v))
		return
	}
	var at uint32
	if n := len(lk.free); n > 0 {
		at = lk.free[n-1]
		lk.free = lk.free[:n-1]
		lk.s[at] = strings.Clone(v)
	} else {
		at = uint32(len(lk.s))
		lk.s = append(lk.s, strings.Clone(v))
	}
	*k = vkey{}
	binary.LittleEndian.PutUint32(k.b[:4], at)
	k.b[shortKey] = longKey
}

// clear makes k the empty value, giving back its long string.
func (k *vkey) clear(lk *longKeys) {
	if k.b[shortKey] == longKey {
		at := binary.LittleEndian.Uint32(k.b[:4])
		lk.s[at] = ""
		lk.free = append(lk.free, at)
	}
	*k = vkey{}
}

// is reports whether k holds v.
func (k *vkey) is(lk *longKeys, v string) bool {
	if n := k.b[shortKey]; n <= shortKey {
		return len(v) == int(n) && string(k.b[:n]) == v
	}
	return lk.s[binary.LittleEndian.Uint32(k.b[:4])] == v
}

// view is k's value as a string that shares k's memory: valid while the slot holds this value
// (under the shard's lock); clone it to keep it longer.
func (k *vkey) view(lk *longKeys) string {
	n := int(k.b[shortKey])
	if n == longKey {
		return lk.s[binary.LittleEndian.Uint32(k.b[:4])]
	}
	if n == 0 {
		return ""
	}
	return unsafe.String(&k.b[0], n)
}
