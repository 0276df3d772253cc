package wire

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// metadataField is dynamic_metadata {fields {key: value}} encoded as setIdentity encodes it.
func metadataField(t testing.TB, key, value string) []byte {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{key: value})
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(&authv3.CheckResponse{DynamicMetadata: s})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fillAllowed gives a the remove list, the three response headers (when headers) and the
// metadata of the arguments.
func fillAllowed(t testing.TB, c *Codec, remove []string, headers bool, k, v string) *Allowed {
	a := c.Allowed(remove)
	if headers {
		vals := a.ResponseHeaders()
		vals[0] = corev3.HeaderValue{Key: "x-ratelimit-limit", Value: v}
		vals[1] = corev3.HeaderValue{Key: "x-ratelimit-remaining", Value: ""}
		vals[2] = corev3.HeaderValue{Key: k, Value: "17"}
	}
	if k != "" {
		a.SetMetadata(append(a.MetadataBuffer(), metadataField(t, k, v)...))
	}
	return a
}

// An allowed answer of Allowed is encoded directly to the bytes proto.Marshal writes, then
// reset and reused; the same answer changed where the direct encoder does not look is encoded
// the generic way.
func TestCodecEncodesAllowed(t *testing.T) {
	c := NewCodec()
	cases := []struct {
		name    string
		remove  []string
		headers bool
		k, v    string
	}{
		{"bare", nil, false, "", ""},
		{"remove", []string{"x-origin", ""}, false, "", ""},
		{"headers", nil, true, "x-ratelimit-reset", "5, 5;w=1"},
		{"metadata", []string{"x-origin"}, false, "origin", "web"},
		{"all", []string{"x-origin", "x-user"}, true, "resource", "GET:/items"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := fillAllowed(t, c, tc.remove, tc.headers, tc.k, tc.v)
			want, err := proto.Marshal(a.Response())
			if err != nil {
				t.Fatal(err)
			}
			direct, ok := marshalAllowed(a)
			if !ok || !bytes.Equal(direct, want) {
				t.Fatalf("direct encoding = %x, %v; want %x", direct, ok, want)
			}
			data, err := c.Marshal(a.Response())
			if err != nil || !bytes.Equal(data.Materialize(), want) {
				t.Fatalf("Marshal = %x, %v; want %x", data.Materialize(), err, want)
			}
			// Given back: the next answer is fresh.
			if a.resp.HttpResponse != nil || len(a.resp.ProtoReflect().GetUnknown()) > 0 {
				t.Fatalf("answer not reset after encoding: %v", a.Response())
			}
			again := c.Allowed(nil)
			if r := again.Response(); r.GetOkResponse().GetHeadersToRemove() != nil || r.GetOkResponse().GetResponseHeadersToAdd() != nil ||
				len(r.ProtoReflect().GetUnknown()) > 0 || r.GetStatus().GetCode() != 0 {
				t.Fatalf("reused answer = %v", r)
			}
			c.allowed.put(again.Response())
		})
	}

	changes := map[string]func(a *Allowed){
		"status message": func(a *Allowed) { a.status.Message = "x" },
		"upstream header": func(a *Allowed) {
			a.http.Headers = []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "k", Value: "v"}}}
		},
		"append": func(a *Allowed) {
			//lint:ignore SA1019 a deprecated field, set as an old handler would
			a.opts[1].Append = wrapperspb.Bool(true)
		},
		"raw value": func(a *Allowed) { a.vals[2].RawValue = []byte("r") },
		"other option": func(a *Allowed) {
			a.http.ResponseHeadersToAdd = []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "k"}}}
		},
		"query": func(a *Allowed) { a.http.QueryParametersToRemove = []string{"q"} },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			a := fillAllowed(t, c, []string{"x-origin"}, true, "origin", "web")
			change(a)
			if _, ok := marshalAllowed(a); ok {
				t.Fatal("encoded directly")
			}
			want, err := proto.Marshal(a.Response())
			if err != nil {
				t.Fatal(err)
			}
			data, err := c.Marshal(a.Response())
			if err != nil || !bytes.Equal(data.Materialize(), want) {
				t.Fatalf("Marshal = %x, %v; want %x", data.Materialize(), err, want)
			}
		})
	}

	// An answer made elsewhere is encoded and left as it was.
	other := &authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{HeadersToRemove: []string{"a"}}}}
	before := proto.Clone(other)
	for range 2 {
		if _, err := c.Marshal(other); err != nil {
			t.Fatal(err)
		}
	}
	if !proto.Equal(other, before) {
		t.Fatalf("answer made elsewhere changed: %v", other)
	}
}

// An answer given back keeps its metadata buffer for the next one, up to maxKeptMetadata.
func TestAllowedKeepsBoundedMetadata(t *testing.T) {
	for _, size := range []int{100, maxKeptMetadata, maxKeptMetadata + 1, 1 << 20} {
		a := &Allowed{}
		a.SetMetadata(make([]byte, size))
		a.reset()
		kept := cap(a.MetadataBuffer())
		if want := size <= maxKeptMetadata; (kept >= size) != want || (!want && kept != 0) {
			t.Errorf("metadata of %d bytes: %d kept, want the buffer kept only up to %d", size, kept, maxKeptMetadata)
		}
	}
}

// FuzzMarshalAllowed: whatever the strings, the direct encoding is what proto.Marshal writes
// (or, for bytes that are not UTF-8, bytes that decode leniently to the same answer).
func FuzzMarshalAllowed(f *testing.F) {
	f.Add("x-origin", "", true, "origin", "web", uint8(2))
	f.Add("\xff", "x", false, "", "", uint8(0))
	f.Add("", "a\x00b", true, "k\xfe", "v", uint8(9))
	c := NewCodec()
	f.Fuzz(func(t *testing.T, r0, r1 string, headers bool, k, v string, n uint8) {
		var remove []string
		for i := range int(n % 5) {
			remove = append(remove, []string{r0, r1}[i%2])
		}
		a := c.Allowed(remove)
		if headers {
			vals := a.ResponseHeaders()
			vals[0] = corev3.HeaderValue{Key: k, Value: v}
			vals[2] = corev3.HeaderValue{Key: r0, Value: r1}
		}
		if n%2 == 1 {
			// The handler writes only UTF-8 there (Envoy refuses anything else).
			a.SetMetadata(append(a.MetadataBuffer(), metadataField(t, strings.ToValidUTF8(k, "?"), strings.ToValidUTF8(v, "?"))...))
		}
		got, ok := marshalAllowed(a)
		if !ok {
			t.Fatalf("answer refused: %v", a.Response())
		}
		want, err := proto.Marshal(a.Response())
		if err == nil {
			if !bytes.Equal(got, want) {
				t.Fatalf("%v:\n got %x\nwant %x", a.Response(), got, want)
			}
			return
		}
		dec := new(authv3.CheckResponse)
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(got)}, dec); err != nil {
			t.Fatalf("%v: %v", a.Response(), err)
		}
		exp := new(authv3.CheckResponse) // the metadata decoded, as the answer holds it encoded
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want0(t, c, a))}, exp); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(dec, exp) {
			t.Fatalf("decoded %v, want %v", dec, exp)
		}
	})
}

// want0 is a's answer encoded the generic way (lenient where it must be), a copy of it made
// elsewhere so that the pool is not involved.
func want0(t *testing.T, c *Codec, a *Allowed) []byte {
	t.Helper()
	data, err := c.Marshal(proto.Clone(a.Response()))
	if err != nil {
		t.Fatal(err)
	}
	return data.Materialize()
}
