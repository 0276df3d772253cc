package envoysim

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

func routeFromYAML(t *testing.T, y string) *routev3.Route {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	var r routev3.Route
	if err := protojson.Unmarshal(js, &r); err != nil {
		t.Fatal(err)
	}
	if err := r.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	return &r
}

// oneLimit wraps actions (YAML list items) in a route with one rate limit.
func oneLimit(t *testing.T, extra, actions string) *routev3.Route {
	return routeFromYAML(t, `
name: r
match: {prefix: /}
route: {cluster: c}
typed_per_filter_config:
  envoy.filters.http.ratelimit:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
    rate_limits:
    - `+extra+`
      actions:
`+actions)
}

// actionCase is one rate limit's extra settings and actions (YAML), a request, and the
// descriptors Envoy sends for it.
type actionCase struct {
	name    string
	extra   string
	actions string
	req     Request
	want    []Descriptor
}

// actionCases are TestDescriptorsActions's cases; TestRealDescriptors sends each through Envoy.
func actionCases() []actionCase {
	remote := netip.MustParseAddrPort("10.1.2.3:5555")
	base := Request{
		Method: "GET",
		Path:   "/p?item=a%20b&item=second&empty=",
		Host:   "api.example",
		Headers: map[string][]string{
			"x-user":     {"u1", "u2"},
			"user-agent": {"SomeBot/1.0"},
		},
		Remote: remote,
	}
	return []actionCase{
		{
			name:    "generic_key keeps its key, defaults to generic_key",
			actions: "      - generic_key: {descriptor_key: resource, descriptor_value: R}\n      - generic_key: {descriptor_value: V}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"resource", "R"}, {"generic_key", "V"}}}},
		},
		{
			name:    "request_headers takes the first value of a repeated header",
			actions: "      - request_headers: {header_name: X-User, descriptor_key: user}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"user", "u1"}}}},
		},
		{
			name:    "an absent header drops the whole descriptor",
			actions: "      - generic_key: {descriptor_value: V}\n      - request_headers: {header_name: x-missing, descriptor_key: m}\n",
			req:     base,
			want:    nil,
		},
		{
			name:    "skip_if_absent skips only the entry",
			actions: "      - generic_key: {descriptor_value: V}\n      - request_headers: {header_name: x-missing, descriptor_key: m, skip_if_absent: true}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"generic_key", "V"}}}},
		},
		{
			// RateLimitPolicy::populateDescriptors: a skipped action adds no entry, and the
			// descriptor is sent however few entries it has.
			name:    "a descriptor left empty by skips is still sent",
			actions: "      - request_headers: {header_name: x-missing, descriptor_key: m, skip_if_absent: true}\n",
			req:     base,
			want:    []Descriptor{{}},
		},
		{
			name:    "query_parameters decodes and takes the first value",
			actions: "      - query_parameters: {query_parameter_name: item, descriptor_key: item_id}\n      - query_parameters: {query_parameter_name: empty, descriptor_key: e}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"item_id", "a b"}, {"e", ""}}}},
		},
		{
			name:    "an absent query parameter drops the descriptor",
			actions: "      - query_parameters: {query_parameter_name: nope, descriptor_key: nope}\n",
			req:     base,
			want:    nil,
		},
		{
			name:    "remote_address is the client IP",
			actions: "      - remote_address: {}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"remote_address", "10.1.2.3"}}}},
		},
		{
			name:    "remote_address of an IPv4-mapped IPv6 peer stays mapped",
			actions: "      - remote_address: {}\n",
			req:     func() Request { r := base; r.Remote = netip.MustParseAddrPort("[::ffff:192.0.2.7]:1"); return r }(),
			want:    []Descriptor{{Entries: []Entry{{"remote_address", "::ffff:192.0.2.7"}}}},
		},
		{
			name:    "header_value_match appends on a match",
			actions: "      - header_value_match: {descriptor_value: bot, headers: [{name: user-agent, string_match: {contains: bot, ignore_case: true}}]}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"header_match", "bot"}}}},
		},
		{
			name:    "header_value_match with no match drops the descriptor",
			actions: "      - header_value_match: {descriptor_key: k, descriptor_value: v, headers: [{name: user-agent, string_match: {exact: curl}}]}\n",
			req:     base,
			want:    nil,
		},
		{
			name:    "header_value_match expect_match false appends when it does not match",
			actions: "      - header_value_match: {descriptor_key: k, descriptor_value: v, expect_match: false, headers: [{name: x-absent, present_match: true}]}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"k", "v"}}}},
		},
		{
			name:    "pseudo-headers are readable",
			actions: "      - request_headers: {header_name: ':method', descriptor_key: m}\n      - request_headers: {header_name: ':path', descriptor_key: p}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"m", "GET"}, {"p", "/p?item=a%20b&item=second&empty="}}}},
		},
		{
			name:    "hits_addend and apply_on_stream_done are carried",
			extra:   "apply_on_stream_done: true\n      hits_addend: {number: 3, is_negative_hits: true}\n",
			actions: "      - generic_key: {descriptor_value: V}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"generic_key", "V"}}, HitsAddend: 3, HasHitsAddend: true, IsNegativeHits: true, OnStreamDone: true}},
		},
		{
			// RateLimitPolicy keeps hits_addend_ = number().value() whatever it is; the gRPC
			// client sends it when set, 0 included.
			name:    "a hits_addend number 0 is kept and sent",
			extra:   "hits_addend: {number: 0}\n",
			actions: "      - generic_key: {descriptor_value: V}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"generic_key", "V"}}, HasHitsAddend: true}},
		},
		{
			name:    "x_ratelimit_option is carried",
			extra:   "x_ratelimit_option: \"OFF\"\n",
			actions: "      - generic_key: {descriptor_value: V}\n",
			req:     base,
			want:    []Descriptor{{Entries: []Entry{{"generic_key", "V"}}, XRateLimitOption: routev3.RateLimit_OFF}},
		},
	}
}

// TestDescriptorsActions: one case per behaviour of Envoy's rate-limit actions
// (source/common/router/router_ratelimit.cc: GenericKeyAction, RequestHeadersAction — the
// first value of a repeated header, skip_if_absent —, QueryParametersAction,
// RemoteAddressAction, HeaderValueMatchAction with expect_match) and of
// RateLimitPolicy::populateDescriptors (ratelimit_config.cc: a failed action drops the
// descriptor, a skipped one adds nothing, hits_addend kept as configured, 0 included).
func TestDescriptorsActions(t *testing.T) {
	tests := actionCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := oneLimit(t, tt.extra, tt.actions)
			got, err := Descriptors(r, tt.req)
			if err != nil {
				t.Fatalf("Descriptors: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Descriptors = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// unmodelledCases are rate limits Descriptors refuses: settings it does not model, and ones
// Envoy refuses to load ("envoy refuses it"). TestRealDescriptorsUnmodelled runs each in Envoy.
var unmodelledCases = []struct {
	name    string
	extra   string
	actions string
	want    string
}{
	{"source_cluster", "", "      - source_cluster: {}\n", "not modelled"},
	{"hits_addend format", "hits_addend: {format: '%BYTES_RECEIVED%'}\n", "      - generic_key: {descriptor_value: V}\n", "hits_addend.format"},
	{"legacy header matcher", "", "      - header_value_match: {descriptor_value: v, headers: [{name: a, exact_match: b}]}\n", "not modelled"},
	// Refused by RateLimitPolicy::RateLimitPolicy: Envoy would not load the config.
	{"stage", "stage: 1\n", "      - generic_key: {descriptor_value: V}\n", "envoy refuses it: 'stage'"},
	{"disable_key", "disable_key: k\n", "      - generic_key: {descriptor_value: V}\n", "envoy refuses it: 'stage' field and 'disable_key'"},
	{"hits_addend with neither", "hits_addend: {is_negative_hits: true}\n", "      - generic_key: {descriptor_value: V}\n", "envoy refuses it: hits_addend must contain either"},
	{"hits_addend with both", "hits_addend: {number: 1, format: '%BYTES_RECEIVED%'}\n", "      - generic_key: {descriptor_value: V}\n", "envoy refuses it: hits_addend must contain either"},
}

func TestDescriptorsUnmodelled(t *testing.T) {
	tests := unmodelledCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := oneLimit(t, tt.extra, tt.actions)
			_, err := Descriptors(r, Request{Headers: map[string][]string{"a": {"b"}}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Descriptors error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestDescriptorsWithoutRateLimits(t *testing.T) {
	r := routeFromYAML(t, "name: r\nmatch: {prefix: /}\nroute: {cluster: c}\n")
	got, err := Descriptors(r, Request{})
	if err != nil || got != nil {
		t.Errorf("Descriptors(route without rate limits) = %v, %v; want nil, nil", got, err)
	}
}

func TestDescriptorProto(t *testing.T) {
	d := Descriptor{Entries: []Entry{{"a", "1"}, {"b", "2"}}, HitsAddend: 4, HasHitsAddend: true, IsNegativeHits: true}
	p := d.Proto()
	if got := len(p.GetEntries()); got != 2 {
		t.Fatalf("entries = %d, want 2", got)
	}
	if got := p.GetEntries()[1].GetKey() + "=" + p.GetEntries()[1].GetValue(); got != "b=2" {
		t.Errorf("entry[1] = %s, want b=2", got)
	}
	if got := p.GetHitsAddend().GetValue(); got != 4 {
		t.Errorf("hits_addend = %d, want 4", got)
	}
	if !p.GetIsNegativeHits() {
		t.Error("is_negative_hits = false, want true")
	}
	if got := (Descriptor{}).Proto().GetHitsAddend(); got != nil {
		t.Errorf("unset hits_addend = %v, want nil", got)
	}
	if got := (Descriptor{HasHitsAddend: true}).Proto().GetHitsAddend(); got == nil || got.GetValue() != 0 {
		t.Errorf("hits_addend 0 = %v, want an explicit 0", got)
	}
}

func BenchmarkDescriptors(b *testing.B) {
	c, err := Load(shippedEnvoy)
	if err != nil {
		b.Fatal(err)
	}
	route := c.Route("downloads")
	r := Request{Method: "GET", Path: "/downloads/f", Headers: map[string][]string{"x-origin": {"web"}, "x-user-id": {"u1"}, "x-request-id": {"rid-1"}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Descriptors(route, r); err != nil {
			b.Fatal(err)
		}
	}
}
