// Package wire is the service's gRPC codec: the "proto" codec, except that it decides on invalid
// UTF-8 rather than refusing it, and encodes the rate-limit answers it hands out (Codec.Answer)
// directly and reuses them once encoded.
package wire

import (
	"bytes"
	"fmt"
	"os"
	"sync"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Codec is the gRPC "proto" codec, except that it never fails a call for invalid UTF-8 in a
// proto3 string field.
//
// protobuf-go refuses to decode (and to encode) a proto3 string that is not valid UTF-8, and
// gRPC then fails the call with Internal before the handler runs. Envoy does not check: a header
// value or a descriptor value is whatever bytes the client sent (HTTP/1 header values are
// octets). With the default codec, a used-up value sent with one invalid byte in it fails the
// rate-limit call, which Envoy's ratelimit filter lets through under failure_mode_deny: false,
// and an ext_authz request whose headers carry such bytes is refused. With this codec every
// request is decided on its bytes, exactly as they came.
//
// A message that protobuf-go accepts is decoded by it, at its usual cost. Only when it refuses
// one is the message decoded again through a mirror of its type in which every proto3 string is
// bytes (and every map a list of its entries, which is the same on the wire), then copied into
// the real message with each string holding the bytes as sent. Encoding falls back the same
// way, so an answer that echoes such bytes (a header value) is sent rather than failing.
//
// A Codec also holds pools of answers, rate-limit answers (Answer) and allowed Check answers
// (Allowed): the handler takes one, fills it, and the Codec that encodes it gives it back. A Codec is safe for concurrent use; use the one
// value both as the server's codec and as the handler's source of answers.
type Codec struct {
	mirrors sync.Map   // protoreflect.FullName -> protoreflect.MessageType, built once each
	build   sync.Mutex // serialises building a mirror
	answers answerPool
	allowed pool[*authv3.CheckResponse, Allowed, *Allowed]
}

var _ encoding.CodecV2 = (*Codec)(nil)

// NewCodec returns a Codec; register it with grpc.ForceServerCodecV2 (or a client's
// grpc.ForceCodecV2). It reuses no answer while gRPC's binary log is on (its environment
// variable GRPC_BINARY_LOG_FILTER set): that log keeps each answer after it is encoded.
func NewCodec() *Codec {
	c := &Codec{}
	c.answers.keep = os.Getenv("GRPC_BINARY_LOG_FILTER") != ""
	c.allowed.keep = c.answers.keep
	return c
}

// Answer returns an OK rate-limit answer with n OK statuses, taken from the Codec's pool: the
// Codec's Marshal gives it back once it has encoded it (see answerPool). A caller that will not
// hand it to this Codec's Marshal may give it back with Release, or leave it.
func (c *Codec) Answer(n int) *rlsv3.RateLimitResponse { return c.answers.get(n) }

// Release gives r back to the pool if it is an answer of Answer not yet encoded, and does
// nothing otherwise. It is what Marshal does after encoding one; after Release, r must not be
// used.
func (c *Codec) Release(r *rlsv3.RateLimitResponse) { c.answers.put(r) }

// Name is "proto": the codec replaces the default one for the same content subtype.
func (*Codec) Name() string { return "proto" }

// Marshal encodes v as protobuf-go does, falling back to the mirror for invalid UTF-8.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("proto: cannot marshal %T, want a proto.Message", v)
	}
	if r, ok := v.(*authv3.CheckResponse); ok {
		if a, ok := c.allowed.take(r); ok {
			defer c.allowed.free(a)
			if b, ok := marshalAllowed(a); ok {
				return wireOf(b), nil
			}
		}
	}
	if r, ok := v.(*rlsv3.RateLimitResponse); ok {
		if a, ok := c.answers.take(r); ok {
			// An answer of Answer, encoded directly when it can be; once encoded, gRPC does
			// not read it again (see answerPool) and it is reused.
			defer c.answers.free(a)
			if b, ok := marshalAnswer(r); ok {
				return wireOf(b), nil
			}
		}
	}
	b, err := proto.Marshal(m)
	if err != nil {
		var lerr error
		if b, lerr = c.lenientMarshal(m); lerr != nil {
			return nil, err
		}
	}
	return wireOf(b), nil
}

// wire is an encoded message as gRPC takes it, in one allocation besides its bytes: a
// *mem.SliceBuffer is a Buffer without boxing the slice, and the BufferSlice is the array
// next to it. (gRPC's pool recycles only buffers of 1 KiB and more, more than an answer
// usually is, so the bytes are the message's own.)
type wire struct {
	bs [1]mem.Buffer
	sb mem.SliceBuffer
}

func wireOf(b []byte) mem.BufferSlice {
	w := &wire{sb: b}
	w.bs[0] = &w.sb
	return w.bs[:]
}

// Unmarshal decodes data into v as protobuf-go does, falling back to the mirror for invalid
// UTF-8.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("proto: cannot unmarshal into %T, want a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	err := proto.Unmarshal(buf.ReadOnlyData(), m)
	if err == nil {
		return nil
	}
	proto.Reset(m)
	if lerr := c.lenientUnmarshal(bytes.Clone(buf.ReadOnlyData()), m); lerr != nil {
		proto.Reset(m)
		return err // the message is broken for other reasons: say what protobuf-go said
	}
	return nil
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV2:
		return v
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	}
	return nil
}

// lenientUnmarshal decodes b through the mirror of m's type and copies the result into m.
func (c *Codec) lenientUnmarshal(b []byte, m proto.Message) error {
	mt, err := c.mirror(m.ProtoReflect().Descriptor())
	if err != nil {
		return err
	}
	mm := mt.New()
	if err := (proto.UnmarshalOptions{}).Unmarshal(b, mm.Interface()); err != nil {
		return err
	}
	copyMessage(m.ProtoReflect(), mm)
	return nil
}

// lenientMarshal copies m into a mirror of its type and encodes that.
func (c *Codec) lenientMarshal(m proto.Message) ([]byte, error) {
	mt, err := c.mirror(m.ProtoReflect().Descriptor())
	if err != nil {
		return nil, err
	}
	mm := mt.New()
	copyMessage(mm, m.ProtoReflect())
	return proto.Marshal(mm.Interface())
}

// mirror returns (building it once) the mirror type of md: the same messages with every string
// field of a proto3 file typed bytes and every map entry of a proto3 file a plain message.
func (c *Codec) mirror(md protoreflect.MessageDescriptor) (protoreflect.MessageType, error) {
	if mt, ok := c.mirrors.Load(md.FullName()); ok {
		return mt.(protoreflect.MessageType), nil
	}
	c.build.Lock()
	defer c.build.Unlock()
	if mt, ok := c.mirrors.Load(md.FullName()); ok {
		return mt.(protoreflect.MessageType), nil
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		fp := protodesc.ToFileDescriptorProto(f)
		if f.Syntax() == protoreflect.Proto3 {
			for _, msg := range fp.GetMessageType() {
				relax(msg)
			}
		}
		set.File = append(set.File, fp)
	}
	add(md.ParentFile())
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("mirror of %s: %w", md.FullName(), err)
	}
	d, err := files.FindDescriptorByName(md.FullName())
	if err != nil {
		return nil, fmt.Errorf("mirror of %s: %w", md.FullName(), err)
	}
	mmd, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("mirror of %s: not a message", md.FullName())
	}
	mt := dynamicpb.NewMessageType(mmd)
	c.mirrors.Store(md.FullName(), mt)
	return mt, nil
}

// relax types every string field of msg (and of its nested messages) bytes, and turns map
// entries into plain messages (a map key cannot be bytes; the wire format is the same).
func relax(msg *descriptorpb.DescriptorProto) {
	if msg.GetOptions().GetMapEntry() {
		msg.Options.MapEntry = nil
	}
	for _, f := range msg.GetField() {
		if f.GetType() == descriptorpb.FieldDescriptorProto_TYPE_STRING {
			f.Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
			f.DefaultValue = nil
		}
	}
	for _, n := range msg.GetNestedType() {
		relax(n)
	}
}

// copyMessage copies src into dst, field by field by number. The two are the same message, one
// of them possibly its mirror: strings and bytes convert into each other, maps and lists of
// map entries too. Unknown fields are kept.
func copyMessage(dst, src protoreflect.Message) {
	fields := dst.Descriptor().Fields()
	src.Range(func(sfd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if sfd.IsExtension() {
			return true
		}
		dfd := fields.ByNumber(sfd.Number())
		if dfd == nil {
			return true
		}
		switch {
		case dfd.IsMap():
			dm := dst.Mutable(dfd).Map()
			put := func(k, val protoreflect.Value) {
				dm.Set(convert(dfd.MapKey(), k, nil).MapKey(), convert(dfd.MapValue(), val, dm.NewValue))
			}
			if sfd.IsMap() {
				v.Map().Range(func(k protoreflect.MapKey, val protoreflect.Value) bool {
					put(k.Value(), val)
					return true
				})
				break
			}
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				e := l.Get(i).Message()
				ef := e.Descriptor().Fields()
				kfd, vfd := ef.ByNumber(1), ef.ByNumber(2)
				put(e.Get(kfd), e.Get(vfd))
			}
		case sfd.IsMap(): // into a mirror's list of entries
			dl := dst.Mutable(dfd).List()
			v.Map().Range(func(k protoreflect.MapKey, val protoreflect.Value) bool {
				ev := dl.NewElement()
				e := ev.Message()
				ef := e.Descriptor().Fields()
				kfd, vfd := ef.ByNumber(1), ef.ByNumber(2)
				e.Set(kfd, convert(kfd, k.Value(), nil))
				e.Set(vfd, convert(vfd, val, func() protoreflect.Value { return e.NewField(vfd) }))
				dl.Append(ev)
				return true
			})
		case dfd.IsList():
			dl := dst.Mutable(dfd).List()
			sl := v.List()
			for i := 0; i < sl.Len(); i++ {
				dl.Append(convert(dfd, sl.Get(i), dl.NewElement))
			}
		default:
			dst.Set(dfd, convert(dfd, v, func() protoreflect.Value { return dst.NewField(dfd) }))
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(append(protoreflect.RawFields(nil), u...))
	}
}

// convert returns the single value v as a value of field dfd: a string as bytes or the reverse,
// a message copied into one made by newMsg (nil for a map key).
func convert(dfd protoreflect.FieldDescriptor, v protoreflect.Value, newMsg func() protoreflect.Value) protoreflect.Value {
	switch dfd.Kind() {
	case protoreflect.StringKind:
		if b, ok := v.Interface().([]byte); ok {
			return protoreflect.ValueOfString(string(b))
		}
	case protoreflect.BytesKind:
		if s, ok := v.Interface().(string); ok {
			return protoreflect.ValueOfBytes([]byte(s))
		}
		return protoreflect.ValueOfBytes(append([]byte(nil), v.Bytes()...))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		dv := newMsg()
		if sm, ok := v.Interface().(protoreflect.Message); ok && sm.IsValid() {
			copyMessage(dv.Message(), sm)
		}
		return dv
	}
	return v
}
