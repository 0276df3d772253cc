package envoyapi

import (
	"slices"
	"strings"
	"unicode/utf8"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi/wire"
	"github.com/extauthz/extauthz/policy"
)

// MetadataNamespace is the dynamic-metadata namespace of an allowed Check's identity: Envoy's
// ext_authz filter puts what the answer carries there, where the rate-limit filter's metadata
// actions (source DYNAMIC) read it.
const MetadataNamespace = "envoy.filters.http.ext_authz"

// Keys of the identity struct besides one per param.
const (
	MetadataResource = "resource"
	MetadataOrigin   = "origin"
)

// Field numbers of the messages the identity is written in, read from their descriptors.
var (
	fieldCheckDynamicMetadata = fieldNumber((*authv3.CheckResponse)(nil), "dynamic_metadata") // google.protobuf.Struct
	fieldStructFields         = fieldNumber((*structpb.Struct)(nil), "fields")                // map<string, Value>: entries of key 1, value 2
	fieldValueString          = fieldNumber((*structpb.Value)(nil), "string_value")
	fieldValueList            = fieldNumber((*structpb.Value)(nil), "list_value") // ListValue: values 1
)

func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// setIdentity gives a the dynamic metadata of an allowed Check: the resource, the origin
// (when there is one) and each param of e that a rule on the resource reads, a param of one
// value as a string (what a metadata action reads), one of several values as a list of them.
// Sensitive params are given as their keyed hash (Options.Redact). Params no rule on the
// resource reads are left out, and so is a param named like the resource or origin key.
//
// Envoy refuses an answer holding a string that is not UTF-8 (and fails the Check: 503), so
// bytes that are not UTF-8 are written as U+FFFD: values that differ only there read the same
// in the metadata. The struct is encoded directly into the answer's unknown fields, as the
// bytes proto.Marshal writes for CheckResponse.dynamic_metadata, in the buffer the pooled
// answer keeps (no allocation once it has grown), where a structpb message costs two
// allocations a field and a map; the answer's GetDynamicMetadata stays nil until decoded.
func (s *Server) setIdentity(a *wire.Allowed, e *descriptors.Entry, rules *policy.Rules) {
	var buf [8]metaField
	fields := append(buf[:0], metaField{key: MetadataResource, one: validUTF8(e.Resource)})
	if e.Origin != "" {
		fields = append(fields, metaField{key: MetadataOrigin, one: validUTF8(e.Origin)})
	}
	for _, p := range e.Params {
		if !rules.Reads(e.Resource, p.Name) || p.Name == MetadataResource || p.Name == MetadataOrigin {
			continue
		}
		f := metaField{key: validUTF8(p.Name)}
		if len(p.Values) == 1 {
			f.one = validUTF8(s.redact(p.Name, p.Values[0]))
		} else {
			f.list = make([]string, len(p.Values))
			for i, v := range p.Values {
				f.list[i] = validUTF8(s.redact(p.Name, v))
			}
		}
		fields = append(fields, f)
	}
	size := 0
	for i := range fields {
		size += protowire.SizeTag(fieldStructFields) + protowire.SizeBytes(fields[i].entrySize())
	}
	b := slices.Grow(a.MetadataBuffer(), protowire.SizeTag(fieldCheckDynamicMetadata)+protowire.SizeBytes(size))
	b = protowire.AppendTag(b, fieldCheckDynamicMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	for i := range fields {
		b = fields[i].append(b)
	}
	a.SetMetadata(b)
}

// metaField is one entry of the identity struct: a string, or a list of strings.
type metaField struct {
	key  string
	one  string   // the value, unless list is set
	list []string // the values of a param of several (nil for one value)
}

// stringValueSize is the size of a Value message holding the string v.
func stringValueSize(v string) int {
	return protowire.SizeTag(fieldValueString) + protowire.SizeBytes(len(v))
}

// valueSize is the size of the field's Value message.
func (f *metaField) valueSize() int {
	if f.list == nil {
		return stringValueSize(f.one)
	}
	return protowire.SizeTag(fieldValueList) + protowire.SizeBytes(f.listSize())
}

// listSize is the size of the field's ListValue message.
func (f *metaField) listSize() int {
	n := 0
	for _, v := range f.list {
		n += protowire.SizeTag(1) + protowire.SizeBytes(stringValueSize(v))
	}
	return n
}

// entrySize is the size of the field's map entry message (key 1, value 2).
func (f *metaField) entrySize() int {
	return protowire.SizeTag(1) + protowire.SizeBytes(len(f.key)) + protowire.SizeTag(2) + protowire.SizeBytes(f.valueSize())
}

// append writes the field as one Struct.fields entry.
func (f *metaField) append(b []byte) []byte {
	b = protowire.AppendTag(b, fieldStructFields, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(f.entrySize()))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, f.key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(f.valueSize()))
	if f.list == nil {
		return appendStringValue(b, f.one)
	}
	b = protowire.AppendTag(b, fieldValueList, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(f.listSize()))
	for _, v := range f.list {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(stringValueSize(v)))
		b = appendStringValue(b, v)
	}
	return b
}

// appendStringValue appends the body of a Value holding the string v.
func appendStringValue(b []byte, v string) []byte {
	b = protowire.AppendTag(b, fieldValueString, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func (s *Server) redact(param, value string) string {
	if s.redactFn == nil {
		return value
	}
	return s.redactFn(param, value)
}
