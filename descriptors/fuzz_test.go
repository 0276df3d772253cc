package descriptors

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// FuzzMapping feeds arbitrary request content to both mappings: they must never panic, and what
// they return must stay within the limits.
func FuzzMapping(f *testing.F) {
	f.Add("/p?id=1&id=%zz&x", "a,b,,c", "sid=1; sid=\"2\"", "1.1.1.1, ::1", "k", "v", uint64(3))
	f.Add("?", ",,,,", ";;=;", ",", "", "", uint64(0))
	f.Add("/%", "\xff\xfe", "=", "not-an-ip", "resource", "\x00", uint64(1<<63))
	m, err := New(Config{Authz: AuthzConfig{
		Resource: "{host}{method}:{path}",
		Origin:   []Source{{From: "cookie", Name: "sid"}, {From: "client_ip"}},
		Params: map[string]Source{
			"q": {From: "query", Name: "id", Split: ","},
			"h": {From: "header", Name: "x-h", Split: ","},
			"c": {From: "cookie", Name: "sid"},
			"m": {From: "metadata", Namespace: "jwt", Path: []string{"payload", "sub"}, Split: ","},
		},
		TrustedHops: 2,
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path, hdr, cookie, xff, key, value string, hits uint64) {
		r := req{method: "GET", path: path, addr: "10.0.0.1",
			headers: map[string]string{"x-h": hdr, "cookie": cookie, "x-forwarded-for": xff}}.build()
		// The verified metadata: a string claim (invalid UTF-8 is dropped by structpb), or the
		// key's value as a struct that the path walks through.
		if st, err := structpb.NewStruct(map[string]any{"payload": map[string]any{"sub": hdr, key: map[string]any{value: cookie}}}); err == nil {
			r.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"jwt": st}}
		}
		e, err := m.Check(r)
		if err == nil {
			for _, p := range e.Params {
				if len(p.Values) == 0 || len(p.Values) > MaxValues {
					t.Errorf("param %q has %d values", p.Name, len(p.Values))
				}
				for _, v := range p.Values {
					if v == "" || len(v) > MaxLen {
						t.Errorf("param %q value of %d bytes", p.Name, len(v))
					}
				}
			}
		}
		d := desc("resource", path, key, value, key, hdr)
		d.HitsAddend = nil
		if hits%2 == 1 {
			d = withHits(d, hits, hits%4 == 1)
		}
		es, err := m.RateLimit(&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err == nil && (len(es) != 1 || es[0].Hits < 0) {
			t.Errorf("RateLimit = %+v", es)
		}
	})
}
