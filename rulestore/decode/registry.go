package decode

import (
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Registry is what the formats of one parse tell the decoding layer: their document types (the
// structs their rules are decoded into) and the top-level keys of their files. It knows no
// format: each registers itself, and the caller builds the Registry and hands it to every File
// it reads.
//
// A registered type's fields are read the first time a document of it is decoded, and kept; a
// member whose name is a field of a type read so far, or a name read before, is given that one
// string (not a copy per rule of the file). A YAML file whose top level holds only registered keys can be
// converted item by item (see YAMLItems). Registering costs next to nothing, so a Registry may
// be built for one parse.
//
// A Registry is used by one parse at a time (it is not safe for concurrent use): the Store's
// loads, which share one, are serialised. The zero value registers nothing; so does nil, which
// every method accepts.
type Registry struct {
	types []docType         // the registered types
	keys  []string          // the registered top-level keys
	names map[string]string // the field names of the types read so far
	pool  sync.Pool         // member lists, reused from rule to rule (*[]Member)
}

// Register adds the document types of docs (structs, given as zero values: authorityDoc{}) and
// the top-level keys a file of the format may have. A type of more than 64 fields is a
// programmer's error, and panics.
func (g *Registry) Register(keys []string, docs ...any) {
	g.keys = append(g.keys, keys...)
	for _, k := range keys {
		g.keep(k)
	}
	g.types = slices.Grow(g.types, len(docs))
	for _, doc := range docs {
		t := reflect.TypeOf(doc)
		if t.Kind() != reflect.Struct || t.NumField() > 64 {
			panic("decode: a document type must be a struct of at most 64 fields: " + t.String())
		}
		g.types = append(g.types, docType{t: t})
	}
}

// docType is a registered type, and its fields once read.
type docType struct {
	t  reflect.Type
	fi *fieldInfo
}

// fieldsOf returns the fields of the struct type t: read once for a registered type, every time
// for another.
func (g *Registry) fieldsOf(t reflect.Type) *fieldInfo {
	if g == nil {
		return fieldsOfType(t)
	}
	for i := range g.types {
		d := &g.types[i]
		if d.t != t {
			continue
		}
		if d.fi != nil {
			return d.fi
		}
		d.fi = fieldsOfType(t)
		if g.names == nil {
			g.names = make(map[string]string, 64)
		}
		for name := range d.fi.index {
			if name != "" && name != "-" {
				g.names[name] = name
			}
		}
		return d.fi
	}
	return fieldsOfType(t)
}

// name returns the field name spelt by b, if it is one of a type read so far. The lookup does
// not allocate.
func (g *Registry) name(b []byte) (string, bool) {
	if g == nil {
		return "", false
	}
	name, ok := g.names[string(b)]
	return name, ok
}

// maxNames bounds the names a Registry keeps: the fields of its types, and the other member
// names it has read (a Store's Registry lives as long as the Store, and reads every load).
const maxNames = 512

// keep adds name, a member name read that is not yet known, to the names, while they are
// fewer than maxNames: the next member of that name is given this string.
func (g *Registry) keep(name string) {
	if g == nil || len(g.names) >= maxNames {
		return
	}
	if g.names == nil {
		g.names = make(map[string]string, 64)
	}
	g.names[name] = name
}

// topKeys are the registered top-level keys.
func (g *Registry) topKeys() []string {
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

// fieldsOfType reads the fields of the struct type t.
func fieldsOfType(t reflect.Type) *fieldInfo {
	if t.NumField() > 64 {
		panic("decode: a document struct has more than 64 fields")
	}
	fi := &fieldInfo{t: t, index: make(map[string]int, t.NumField())}
	for i := range t.NumField() {
		fi.index[jsonName(t.Field(i))] = i
	}
	return fi
}

// jsonName is the name of field f in JSON: its json tag's name.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}
