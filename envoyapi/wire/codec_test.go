package wire

import (
	"errors"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// codecCheckRequest is a CheckRequest using maps of strings, maps of messages, header_map with
// raw bytes, a Struct and a oneof, with bad as a header key and value, a raw header value and a
// context extension.
func codecCheckRequest(bad string) *authv3.CheckRequest {
	meta, err := structpb.NewStruct(map[string]any{"k": "v", "n": 1.5, "l": []any{"x", true}})
	if err != nil {
		panic(err)
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 4000}}}},
			Principal: "spiffe://x",
		},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method:  "GET",
			Path:    "/p?q=" + bad,
			Headers: map[string]string{":method": "GET", "x-user": bad, "k" + bad: "v", "plain": "ok"},
			HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: "x-raw", RawValue: []byte("r\xffw")}, {Key: "x-val", Value: bad},
			}},
		}},
		ContextExtensions: map[string]string{"resource": bad},
		MetadataContext:   &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"f": meta}},
	}}
}

func codecRateLimitRequest(bad string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "d" + bad, HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "resource", Value: "items"}, {Key: "item", Value: bad}},
			HitsAddend: wrapperspb.UInt64(0)},
	}}
}

func TestCodecRoundTrip(t *testing.T) {
	c := NewCodec()
	for _, bad := range []string{"valid", "a\xffb", "\xc3\x28", "\xed\xa0\x80", ""} {
		for _, m := range []proto.Message{codecCheckRequest(bad), codecRateLimitRequest(bad)} {
			_, stdErr := proto.Marshal(m)
			if (stdErr == nil) != (bad == "valid" || bad == "") {
				t.Fatalf("%q: proto.Marshal err = %v: the case does not test what it says", bad, stdErr)
			}
			data, err := c.Marshal(m)
			if err != nil {
				t.Fatalf("%q: Marshal %T: %v", bad, m, err)
			}
			if stdErr != nil {
				if err := proto.Unmarshal(data.Materialize(), m.ProtoReflect().New().Interface()); err == nil {
					t.Fatalf("%q: protobuf-go decodes %T: the fallback is not exercised", bad, m)
				}
			}
			got := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(data, got); err != nil {
				t.Fatalf("%q: Unmarshal %T: %v", bad, m, err)
			}
			if !proto.Equal(got, m) {
				t.Errorf("%q: round trip of %T:\n got %v\nwant %v", bad, m, got, m)
			}
		}
	}
}

func TestCodecKeepsBytes(t *testing.T) {
	c := NewCodec()
	data, err := c.Marshal(codecCheckRequest("a\xffb"))
	if err != nil {
		t.Fatal(err)
	}
	var got authv3.CheckRequest
	if err := c.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	h := got.GetAttributes().GetRequest().GetHttp()
	if v := h.GetHeaders()["x-user"]; v != "a\xffb" {
		t.Errorf("x-user = %q, want the bytes as sent", v)
	}
	if v := h.GetHeaders()["ka\xffb"]; v != "v" {
		t.Errorf("key with an invalid byte: %q, want \"v\"", v)
	}
	if v := got.GetAttributes().GetContextExtensions()["resource"]; v != "a\xffb" {
		t.Errorf("context extension = %q", v)
	}
}

func TestCodecRefusesGarbage(t *testing.T) {
	c := NewCodec()
	for _, b := range [][]byte{{0xff}, {0x0a, 0x05, 0x01}, {0x0a, 0x80}} {
		var m authv3.CheckRequest
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &m); err == nil {
			t.Errorf("Unmarshal(%x) = nil error, want the wire error", b)
		}
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal of a non-message succeeded")
	}
}

// FuzzCodec decodes arbitrary bytes as each request type: the codec never panics, and what it
// decodes encodes again to the same message.
func FuzzCodec(f *testing.F) {
	c := NewCodec()
	for _, m := range []proto.Message{codecCheckRequest("a\xffb"), codecRateLimitRequest("\xfe")} {
		data, err := c.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data.Materialize())
	}
	f.Add([]byte{0x0a, 0x02, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []proto.Message{&authv3.CheckRequest{}, &rlsv3.RateLimitRequest{}} {
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m); err != nil {
				continue
			}
			data, err := c.Marshal(m)
			if err != nil {
				t.Fatalf("decoded %T does not encode: %v", m, err)
			}
			again := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(data, again); err != nil {
				t.Fatalf("re-encoded %T does not decode: %v", m, err)
			}
			if !proto.Equal(again, m) {
				t.Fatalf("%T changed in a round trip:\n%v\n%v", m, m, again)
			}
		}
	})
}

func BenchmarkCodecUnmarshal(b *testing.B) {
	c := NewCodec()
	for _, tc := range []struct{ name, bad string }{{"valid", "valid"}, {"invalid-utf8", "a\xffb"}} {
		data, err := c.Marshal(codecCheckRequest(tc.bad))
		if err != nil {
			b.Fatal(err)
		}
		raw := data.Materialize()
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var m authv3.CheckRequest
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCodecConcurrent: the first fallbacks race to build the mirror; every decode is right.
func TestCodecConcurrent(t *testing.T) {
	c := NewCodec()
	data, err := NewCodec().Marshal(codecRateLimitRequest("x\xff"))
	if err != nil {
		t.Fatal(err)
	}
	raw := data.Materialize()
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			var m rlsv3.RateLimitRequest
			err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &m)
			if err == nil && m.GetDescriptors()[0].GetEntries()[1].GetValue() != "x\xff" {
				err = errors.New("value changed: " + m.GetDescriptors()[0].GetEntries()[1].GetValue())
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
