package descriptors

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/hotparam"
)

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *ratelimitv3.RateLimitDescriptor, hits uint64, negative bool) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	d.IsNegativeHits = negative
	return d
}

func TestRateLimit(t *testing.T) {
	tests := []struct {
		name string
		cfg  RateLimitConfig
		req  *rlsv3.RateLimitRequest
		want []Entry
	}{
		{"resource, origin, params",
			RateLimitConfig{},
			&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("resource", "POST:/order", "origin", "svcA", "item_id", "42"),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "POST:/order", Params: []hotparam.Param{p("item_id", "42")}}, Origin: "svcA"}}},
		{"generic_key names the resource when no resource key",
			RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("item_id", "1", "generic_key", "orders", "user", "u"),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "orders", Params: []hotparam.Param{p("item_id", "1"), p("user", "u")}}}}},
		{"repeated generic_key: first is the resource, the rest a param",
			RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("generic_key", "orders", "generic_key", "x"),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "orders", Params: []hotparam.Param{p("generic_key", "x")}}}}},
		{"generic_key is a param when the resource key is present",
			RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("generic_key", "g", "resource", "r"),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "r", Params: []hotparam.Param{p("generic_key", "g")}}}}},
		{"configured keys",
			RateLimitConfig{ResourceKey: "res", OriginKey: "caller"},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("res", "a", "caller", "svc", "origin", "o", "resource", "r"),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "a", Params: []hotparam.Param{p("origin", "o"), p("resource", "r")}}, Origin: "svc"}}},
		{"repeated key gives several values, first resource and origin win",
			RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("resource", "a", "user", "u1", "origin", "o1", "user", "u2", "resource", "b", "origin", "o2", "user", "u3"),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "a", Params: []hotparam.Param{p("user", "u1", "u2", "u3"), p("resource", "b"), p("origin", "o2")}}, Origin: "o1"}}},
		{"no resource at all", RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}},
			[]Entry{{Entry: hotparam.Entry{Params: []hotparam.Param{p("user", "u")}}}}},
		{"empty descriptor", RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}},
			[]Entry{{}}},
		{"hits: request level, descriptor override, negative",
			RateLimitConfig{},
			&rlsv3.RateLimitRequest{HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("resource", "a"),
				withHits(desc("resource", "b"), 7, false),
				withHits(desc("resource", "c"), 1, true),
				withHits(desc("resource", "d"), 0, false),
				withHits(desc("resource", "e"), math.MaxInt64, false),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "a", Hits: 3}}, {Entry: hotparam.Entry{Resource: "b", Hits: 7}}, {Entry: hotparam.Entry{Resource: "c", Hits: 1, Release: true}},
				{Entry: hotparam.Entry{Resource: "d", Hits: 0, Probe: true}}, {Entry: hotparam.Entry{Resource: "e", Hits: math.MaxInt64}}}},
		{"lease_id names the lease, not a param",
			RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("resource", "GET:/c", "item_id", "1", "lease_id", "req-7"),
				withHits(desc("lease_id", "req-7", "resource", "GET:/c", "item_id", "1"), 1, true),
				desc("resource", "GET:/c", "item_id", "2"),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "GET:/c", Params: []hotparam.Param{p("item_id", "1")}, LeaseID: "req-7"}},
				{Entry: hotparam.Entry{Resource: "GET:/c", Params: []hotparam.Param{p("item_id", "1")}, Hits: 1, Release: true, LeaseID: "req-7"}},
				{Entry: hotparam.Entry{Resource: "GET:/c", Params: []hotparam.Param{p("item_id", "2")}}}}},
		{"configured lease key; the default one is then a param; a repeated one too",
			RateLimitConfig{LeaseKey: "x-request-id"},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("resource", "r", "x-request-id", "a", "lease_id", "b", "x-request-id", "c"),
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "r", Params: []hotparam.Param{p("lease_id", "b"), p("x-request-id", "c")}, LeaseID: "a"}}}},
		{"empty lease value is no lease",
			RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("resource", "r", "lease_id", "")}},
			[]Entry{{Entry: hotparam.Entry{Resource: "r"}}}},
		{"negative hits without an addend uses the request's", RateLimitConfig{},
			&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: desc("resource", "a").Entries, IsNegativeHits: true},
			}},
			[]Entry{{Entry: hotparam.Entry{Resource: "a", Release: true}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(Config{RateLimit: tt.cfg})
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.RateLimit(tt.req)
			if err != nil {
				t.Fatalf("RateLimit: %v", err)
			}
			for i := range got {
				if len(got[i].Params) == 0 {
					got[i].Params = nil
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("RateLimit =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestRateLimitErrors(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	many := func(n int, d func(i int) *ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
		ds := make([]*ratelimitv3.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = d(i)
		}
		return ds
	}
	big := &ratelimitv3.RateLimitDescriptor{}
	for range MaxEntries + 1 {
		big.Entries = append(big.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	long := strings.Repeat("x", MaxLen+1)
	tests := []struct {
		name       string
		req        *rlsv3.RateLimitRequest
		field      string
		descriptor int
		reason     error
	}{
		{"nil request", nil, "descriptors", -1, ErrNoDescriptors},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "d"}, "descriptors", -1, ErrNoDescriptors},
		{"too many descriptors", &rlsv3.RateLimitRequest{Descriptors: many(5000, func(int) *ratelimitv3.RateLimitDescriptor { return desc("resource", "a") })},
			"descriptors", -1, ErrTooManyDescriptors},
		{"too many entries", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b"), big}},
			"descriptors[1].entries", 1, ErrTooManyEntries},
		{"empty key", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("resource", "a", "", "v")}},
			"descriptors[0].entries[1].key", 0, ErrEmptyKey},
		{"key too long", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b"), desc("a", "b"), desc(long, "v")}},
			"descriptors[2].entries[0].key", 2, ErrKeyTooLong},
		{"value too long", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("resource", "a", "user", long)}},
			"descriptors[0].entries[1].value", 0, ErrValueTooLong},
		{"hits too large", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("a", "b"), math.MaxInt64+1, false)}},
			"descriptors[0].hits_addend", 0, ErrHitsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := make([]Entry, 1, 4)
			got, err := m.AppendRateLimit(dst, tt.req)
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error = %v, want a *RequestError", err)
			}
			if re.Field != tt.field || re.Descriptor != tt.descriptor || !errors.Is(err, tt.reason) {
				t.Errorf("error = %q (field %q, descriptor %d), want field %q, descriptor %d, reason %v",
					err, re.Field, re.Descriptor, tt.field, tt.descriptor, tt.reason)
			}
			if len(got) != 1 {
				t.Errorf("len(dst) after error = %d, want 1", len(got))
			}
		})
	}
	// The limits themselves pass.
	full := &ratelimitv3.RateLimitDescriptor{}
	for range MaxEntries {
		full.Entries = append(full.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: strings.Repeat("k", MaxLen), Value: strings.Repeat("v", MaxLen)})
	}
	got, err := m.RateLimit(&rlsv3.RateLimitRequest{Descriptors: many(MaxDescriptors, func(int) *ratelimitv3.RateLimitDescriptor { return full })})
	if err != nil || len(got) != MaxDescriptors || len(got[0].Params[0].Values) != MaxEntries {
		t.Errorf("RateLimit at the limits: %d entries, %v; want %d entries", len(got), err, MaxDescriptors)
	}
}

// TestAppendRateLimitReuse maps requests of different shapes into one reused slice: nothing of
// an earlier request may show through.
func TestAppendRateLimitReuse(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		ds   []*ratelimitv3.RateLimitDescriptor
		want []Entry
	}{
		{[]*ratelimitv3.RateLimitDescriptor{desc("generic_key", "g", "a", "1", "a", "2", "b", "3"), desc("resource", "r", "c", "4")},
			[]Entry{{Entry: hotparam.Entry{Resource: "g", Params: []hotparam.Param{p("a", "1", "2"), p("b", "3")}}}, {Entry: hotparam.Entry{Resource: "r", Params: []hotparam.Param{p("c", "4")}}}}},
		{[]*ratelimitv3.RateLimitDescriptor{desc("x", "9", "generic_key", "g2")},
			[]Entry{{Entry: hotparam.Entry{Resource: "g2", Params: []hotparam.Param{p("x", "9")}}}}},
		{[]*ratelimitv3.RateLimitDescriptor{desc("resource", "r", "b", "5", "a", "6"), desc("origin", "o"), withHits(desc("resource", "z"), 2, true)},
			[]Entry{{Entry: hotparam.Entry{Resource: "r", Params: []hotparam.Param{p("b", "5"), p("a", "6")}}}, {Origin: "o"}, {Entry: hotparam.Entry{Resource: "z", Hits: 2, Release: true}}}},
		{[]*ratelimitv3.RateLimitDescriptor{desc("resource", "q", "lease_id", "L")},
			[]Entry{{Entry: hotparam.Entry{Resource: "q", LeaseID: "L"}}}},
		{[]*ratelimitv3.RateLimitDescriptor{desc("resource", "q")},
			[]Entry{{Entry: hotparam.Entry{Resource: "q"}}}},
	}
	var dst []Entry
	for i, s := range steps {
		dst, err = m.AppendRateLimit(dst[:0], &rlsv3.RateLimitRequest{Descriptors: s.ds})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for j := range dst {
			if len(dst[j].Params) == 0 {
				dst[j].Params = nil
			}
		}
		if !reflect.DeepEqual(dst, s.want) {
			t.Errorf("step %d: entries =\n %+v\nwant\n %+v", i, dst, s.want)
		}
	}
}

func BenchmarkAppendRateLimit(b *testing.B) {
	m, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	r := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("resource", "POST:/order", "origin", "svcA", "item_id", "42"),
		desc("resource", "POST:/order", "user", "u1"),
	}}
	var dst []Entry
	b.ReportAllocs()
	for b.Loop() {
		if dst, err = m.AppendRateLimit(dst[:0], r); err != nil {
			b.Fatal(err)
		}
	}
}
