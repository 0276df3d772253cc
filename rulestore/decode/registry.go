package decode

import (
	"reflect"
	"strings"
	"sync"
)

// Registry is what the dialects of one parse tell the decoding layer: their document types
// (the structs their rules are decoded into) and the top-level keys of their files. It knows
// no dialect: each registers itself, and the caller builds the Registry and hands it to every
// File it reads.
//
// A document type's fields are read once, when it is registered; a member whose name is one of
// their names is given that string (not a copy per rule of the file), and a YAML file whose top
// level holds only registered keys can be converted item by item (see YAMLItems).
//
// Register is not safe for concurrent use; a Registry whose registering is done is safe for
// concurrent use by any number of Files. The zero value registers nothing; so does nil, which
// every method accepts.
type Registry struct {
	names  map[string]string           // every field name of the registered types
	fields map[reflect.Type]*fieldInfo // the registered types' fields
	keys   map[string]bool             // the registered top-level keys
	pool   sync.Pool                   // member lists, reused from rule to rule (*[]Member)
}

// Register adds the document types of docs (structs, given as values: authorityDoc{}) and the
// top-level keys a file of the dialect may have.
func (g *Registry) Register(keys []string, docs ...any) {
	if g.names == nil {
		g.names = map[string]string{}
		g.fields = map[reflect.Type]*fieldInfo{}
		g.keys = map[string]bool{}
	}
	for _, k := range keys {
		g.keys[k] = true
	}
	for _, doc := range docs {
		t := reflect.TypeOf(doc)
		if _, ok := g.fields[t]; ok {
			continue
		}
		g.fields[t] = fieldsOfType(t)
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
				g.names[name] = name
			}
		}
	}
}

// fieldsOf returns the fields of the struct type t: read at registration, or now for a type
// that was not registered.
func (g *Registry) fieldsOf(t reflect.Type) *fieldInfo {
	if g != nil {
		if fi, ok := g.fields[t]; ok {
			return fi
		}
	}
	return fieldsOfType(t)
}

// name returns the registered field name spelt by b, if there is one. The lookup does not
// allocate.
func (g *Registry) name(b []byte) (string, bool) {
	if g == nil {
		return "", false
	}
	name, ok := g.names[string(b)]
	return name, ok
}

// topKeys are the registered top-level keys.
func (g *Registry) topKeys() map[string]bool {
	if g == nil {
		return nil
	}
	return g.keys
}

// memberList returns a member list to split one rule into; putMemberList gives it back.
func (g *Registry) memberList() *[]Member {
	if g == nil {
		return new([]Member)
	}
	if b, ok := g.pool.Get().(*[]Member); ok {
		return b
	}
	return new([]Member)
}

func (g *Registry) putMemberList(b *[]Member) {
	if g != nil {
		g.pool.Put(b)
	}
}
