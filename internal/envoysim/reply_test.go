package envoysim

import (
	"reflect"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// status is Envoy's test helper buildDescriptorStatus: requests_per_unit 0 sets no limit.
func dstatus(perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, name string, remaining uint32, resetSeconds int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	s := &rlsv3.RateLimitResponse_DescriptorStatus{LimitRemaining: remaining, DurationUntilReset: durationpb.New(time.Duration(resetSeconds) * time.Second)}
	if perUnit > 0 {
		s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: perUnit, Unit: unit, Name: name}
	}
	return s
}

// The cases of Envoy's test/extensions/filters/http/ratelimit/ratelimit_headers_test.cc
// (RateLimitHeadersTest) for XRateLimitHeaderUtils::populateHeaders, enabled and disabled by
// default.
// rlHeaderCase is the descriptors of a request, the service's statuses, and the x-ratelimit-*
// headers Envoy adds with enable_x_ratelimit_headers DRAFT_VERSION_03 (enabled) and OFF
// (default0).
type rlHeaderCase struct {
	name              string
	statuses          []*rlsv3.RateLimitResponse_DescriptorStatus
	ds                []Descriptor
	enabled, default0 map[string]string
}

// rlHeaderCases are TestRateLimitHeaders's cases; TestRealRateLimitHeaders sends each through
// Envoy.
func rlHeaderCases() []rlHeaderCase {
	const (
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	)
	off := Descriptor{XRateLimitOption: routev3.RateLimit_OFF}
	on := Descriptor{XRateLimitOption: routev3.RateLimit_DRAFT_VERSION_03}
	two := []*rlsv3.RateLimitResponse_DescriptorStatus{dstatus(1, minute, "first", 2, 3), dstatus(4, hour, "second", 5, 6)}
	both := map[string]string{"x-ratelimit-limit": `1, 1;w=60;name="first", 4;w=3600;name="second"`, "x-ratelimit-remaining": "2", "x-ratelimit-reset": "3"}
	firstOnly := map[string]string{"x-ratelimit-limit": `1, 1;w=60;name="first"`, "x-ratelimit-remaining": "2", "x-ratelimit-reset": "3"}
	return []rlHeaderCase{
		{"empty", nil, []Descriptor{{}}, nil, nil},
		{"a status without a limit is ignored", []*rlsv3.RateLimitResponse_DescriptorStatus{dstatus(0, minute, "first", 2, 3), dstatus(4, hour, "second", 5, 6)},
			[]Descriptor{{}, {}}, map[string]string{"x-ratelimit-limit": `4, 4;w=3600;name="second"`, "x-ratelimit-remaining": "5", "x-ratelimit-reset": "6"}, nil},
		{"an empty name is left out", []*rlsv3.RateLimitResponse_DescriptorStatus{dstatus(1, minute, "", 2, 3)}, []Descriptor{{}},
			map[string]string{"x-ratelimit-limit": "1, 1;w=60", "x-ratelimit-remaining": "2", "x-ratelimit-reset": "3"}, nil},
		{"an unknown unit is left out of the policy only", []*rlsv3.RateLimitResponse_DescriptorStatus{dstatus(1, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, "first", 2, 3), dstatus(4, hour, "second", 5, 6)},
			[]Descriptor{{}, {}}, map[string]string{"x-ratelimit-limit": `1, 4;w=3600;name="second"`, "x-ratelimit-remaining": "2", "x-ratelimit-reset": "3"}, nil},
		{"two statuses", two, []Descriptor{{}, {}}, both, nil},
		{"the fewest-remaining descriptor turns them off", two, []Descriptor{off, {}}, nil, nil},
		{"another descriptor turned off is left out of the policy", two, []Descriptor{{}, off}, firstOnly, nil},
		{"explicitly on and off", two, []Descriptor{on, off}, firstOnly, firstOnly},
		{"more statuses than descriptors", two, []Descriptor{{}}, both, nil},
	}
}

func TestRateLimitHeaders(t *testing.T) {
	tests := rlHeaderCases()
	for _, tt := range tests {
		if got := RateLimitHeaders(tt.ds, true, tt.statuses); !reflect.DeepEqual(got, tt.enabled) && len(got)+len(tt.enabled) > 0 {
			t.Errorf("%s, enabled: %v, want %v", tt.name, got, tt.enabled)
		}
		if got := RateLimitHeaders(tt.ds, false, tt.statuses); !reflect.DeepEqual(got, tt.default0) && len(got)+len(tt.default0) > 0 {
			t.Errorf("%s, disabled by default: %v, want %v", tt.name, got, tt.default0)
		}
	}
}

// The answers of TestReplies (TestRealReplies has Envoy get them).
func overLimit() *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses:             []*rlsv3.RateLimitResponse_DescriptorStatus{dstatus(5, rlsv3.RateLimitResponse_RateLimit_SECOND, "", 0, 1)},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "retry-after", Value: "1"}},
		RawBody:              []byte(`{"blocked":"param_flow"}`)}
}

func deniedCheck() *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &status.Status{Code: 7}, HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}, Body: "b",
		Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "retry-after", Value: "2"}}}}}}
}

func okCheck() *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &status.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
		Headers:              []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-ratelimit-limit", Value: "2"}}},
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-ratelimit-remaining", Value: "1"}}}}}}
}

func TestReplies(t *testing.T) {
	c := shipped(t)
	r, err := c.RateLimitReply([]Descriptor{{}}, overLimit())
	if err != nil {
		t.Fatal(err)
	}
	want := Reply{Status: 429, Body: `{"blocked":"param_flow"}`, ClientHeaders: map[string][]string{
		"x-ratelimit-limit": {"5, 5;w=1"}, "x-ratelimit-remaining": {"0"}, "x-ratelimit-reset": {"1"},
		"retry-after": {"1"}, "x-envoy-ratelimited": {"true"}}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("over limit: %+v, want %+v", r, want)
	}
	if r, _ := c.RateLimitReply(nil, nil); r.Status != 0 {
		t.Errorf("a failed call with failure_mode_deny false: %+v, want passed", r)
	}
	// ext_authz: a denial goes to the client; an allow's headers go to the upstream, only
	// response_headers_to_add to the client.
	if r, _ := c.CheckReply(deniedCheck()); r.Status != 429 || r.Body != "b" || r.ClientHeaders["retry-after"][0] != "2" {
		t.Errorf("denied: %+v", r)
	}
	if r, _ := c.CheckReply(okCheck()); r.Status != 0 || r.UpstreamHeaders["x-ratelimit-limit"][0] != "2" || r.ClientHeaders["x-ratelimit-remaining"][0] != "1" || r.ClientHeaders["x-ratelimit-limit"] != nil {
		t.Errorf("allowed: %+v", r)
	}
	if r, _ := c.CheckReply(nil); r.Status != 503 {
		t.Errorf("failed Check with status_on_error 503: %+v", r)
	}
}
