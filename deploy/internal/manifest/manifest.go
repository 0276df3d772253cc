// Package manifest splits rendered YAML into objects and decodes each strictly into the Go
// type its project publishes for its apiVersion and kind: a field the type does not have is
// an error, as is a kind no type is registered for, so that a typo in a manifest fails a test
// instead of being dropped by the API server (or, for a CRD without a schema, kept and
// ignored).
package manifest

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// TypeMeta is the apiVersion and kind of an object.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

func (t TypeMeta) String() string { return t.APIVersion + ", Kind=" + t.Kind }

// Object is one decoded object: its type and the typed value (a pointer).
type Object struct {
	TypeMeta
	Name  string
	Value any
}

// Decoder decodes the kinds registered on it.
type Decoder struct {
	types map[TypeMeta]func(doc []byte) (any, error)
}

// NewDecoder returns a Decoder with no kinds.
func NewDecoder() *Decoder {
	return &Decoder{types: map[TypeMeta]func([]byte) (any, error){}}
}

// Register makes d decode apiVersion/kind into a new value of the type of sample (a pointer)
// with sigs.k8s.io/yaml's strict decoding: the YAML is turned into JSON and decoded with
// unknown fields disallowed, at every depth that decodes by struct fields.
func (d *Decoder) Register(apiVersion, kind string, sample any) {
	t := reflect.TypeOf(sample)
	if t.Kind() != reflect.Pointer {
		panic("manifest: Register needs a pointer sample")
	}
	d.RegisterFunc(apiVersion, kind, func(doc []byte) (any, error) {
		v := reflect.New(t.Elem()).Interface()
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			return nil, err
		}
		return v, nil
	})
}

// RegisterFunc makes d decode apiVersion/kind with decode, for types whose own JSON decoding
// is not strict (protobuf messages).
func (d *Decoder) RegisterFunc(apiVersion, kind string, decode func(doc []byte) (any, error)) {
	d.types[TypeMeta{apiVersion, kind}] = decode
}

// Split returns the YAML documents of stream that hold something (not only comments).
func Split(stream []byte) [][]byte {
	var docs [][]byte
	for _, doc := range bytes.Split(append([]byte("\n"), stream...), []byte("\n---")) {
		// "---" may carry a comment after it on its line.
		if i := bytes.IndexByte(doc, '\n'); i >= 0 && strings.HasPrefix(strings.TrimSpace(string(doc[:i])), "#") {
			doc = doc[i+1:]
		}
		if hasContent(doc) {
			docs = append(docs, doc)
		}
	}
	return docs
}

func hasContent(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		l := strings.TrimSpace(line)
		if l != "" && !strings.HasPrefix(l, "#") {
			return true
		}
	}
	return false
}

// Decode decodes one document.
func (d *Decoder) Decode(doc []byte) (Object, error) {
	var head struct {
		TypeMeta `json:",inline"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return Object{}, err
	}
	decode, ok := d.types[head.TypeMeta]
	if !ok {
		return Object{}, fmt.Errorf("%s %q: no Go type registered for this kind", head.TypeMeta, head.Metadata.Name)
	}
	v, err := decode(doc)
	if err != nil {
		return Object{}, fmt.Errorf("%s %q: %w", head.TypeMeta, head.Metadata.Name, err)
	}
	return Object{TypeMeta: head.TypeMeta, Name: head.Metadata.Name, Value: v}, nil
}

// DecodeAll decodes every document of stream.
func (d *Decoder) DecodeAll(stream []byte) ([]Object, error) {
	var objs []Object
	for _, doc := range Split(stream) {
		o, err := d.Decode(doc)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// Set is decoded objects by kind and name.
type Set []Object

// Find returns the value of the object of kind and name, or nil.
func (s Set) Find(kind, name string) any {
	for _, o := range s {
		if o.Kind == kind && o.Name == name {
			return o.Value
		}
	}
	return nil
}

// Kinds returns how many objects of each kind s holds.
func (s Set) Kinds() map[string]int {
	n := map[string]int{}
	for _, o := range s {
		n[o.Kind]++
	}
	return n
}
