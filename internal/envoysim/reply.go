package envoysim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
)

// Reply is what a filter's answer does to the request: Status 0 lets it through (to the
// upstream, with UpstreamHeaders added to the request, and ClientHeaders added to the response
// the client gets); any other Status is the local reply the client gets, with ClientHeaders
// and Body.
type Reply struct {
	Status          int
	ClientHeaders   map[string][]string
	UpstreamHeaders map[string][]string
	Body            string
}

func (r *Reply) add(to *map[string][]string, k, v string) {
	if *to == nil {
		*to = map[string][]string{}
	}
	(*to)[strings.ToLower(k)] = append((*to)[strings.ToLower(k)], v)
}

// RateLimitReply is what Envoy's ratelimit filter makes of resp, the answer to the request
// path descriptors ds (Filter::complete): on OVER_LIMIT a 429 local reply (rate_limited_status
// when set to 400 or more) with the x-ratelimit-* headers, the service's response_headers_to_add
// and raw_body, and x-envoy-ratelimited; on OK, and on an overall_code of UNKNOWN, which Envoy's
// client reads as OK (GrpcClientImpl::onSuccess), the request goes on, the x-ratelimit-* headers
// and response_headers_to_add reach the client, request_headers_to_add the upstream. With
// filter_enforced at 0% an OVER_LIMIT is not enforced either. A nil resp (the call failed) fails
// open or closed by failure_mode_deny (status_on_error, default 500). e2e/envoy's
// differences_test.go runs these cases through Envoy.
func (c *Config) RateLimitReply(ds []Descriptor, resp *rlsv3.RateLimitResponse) (Reply, error) {
	_, f, err := c.Filters()
	if err != nil {
		return Reply{}, err
	}
	if f == nil {
		return Reply{}, errors.New("no ratelimit filter")
	}
	// rate_limited_as_resource_exhausted changes only what a gRPC call is told; these replies
	// are of HTTP requests (e2e/envoy's TestGRPCStatusThroughEnvoy runs gRPC calls).
	if f.GetEnableRetryAfterHeader() || f.GetFailureModeDenyPercent() != nil {
		return Reply{}, errors.New("ratelimit filter: enable_retry_after_header and failure_mode_deny_percent are not modelled")
	}
	enforced, err := fullOrNone("filter_enforced", f.GetFilterEnforced())
	if err != nil {
		return Reply{}, err
	}
	if _, err := fullOrNone("filter_enabled", f.GetFilterEnabled()); err != nil {
		return Reply{}, err
	}
	var r Reply
	if resp == nil {
		if f.GetFailureModeDeny() {
			r.Status = 500
			if s := f.GetStatusOnError().GetCode(); s != 0 {
				r.Status = int(s)
			}
		}
		return r, nil
	}
	enabled := f.GetEnableXRatelimitHeaders().String() == "DRAFT_VERSION_03"
	for k, v := range RateLimitHeaders(ds, enabled, resp.GetStatuses()) {
		r.add(&r.ClientHeaders, k, v)
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		r.add(&r.ClientHeaders, h.GetKey(), h.GetValue())
	}
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT && enforced {
		r.Status = 429
		// Envoy's FilterConfig::toErrorCode: a code below 400 is not an error; 429 instead.
		if s := f.GetRateLimitedStatus().GetCode(); s >= 400 {
			r.Status = int(s)
		}
		if !f.GetDisableXEnvoyRatelimitedHeader() {
			r.add(&r.ClientHeaders, "x-envoy-ratelimited", "true")
		}
		r.Body = string(resp.GetRawBody())
		return r, nil
	}
	for _, h := range resp.GetRequestHeadersToAdd() {
		r.add(&r.UpstreamHeaders, h.GetKey(), h.GetValue())
	}
	return r, nil
}

// fullOrNone reads a RuntimeFractionalPercent of the ratelimit filter that is 100% when unset:
// whether it is 100% (true) or 0% (false). Any other fraction, which Envoy draws per request,
// is not modelled.
func fullOrNone(field string, p *corev3.RuntimeFractionalPercent) (bool, error) {
	if p == nil {
		return true, nil
	}
	v := p.GetDefaultValue()
	switch {
	case v.GetNumerator() == 0:
		return false, nil
	case v.GetNumerator() >= denominator(v.GetDenominator()):
		return true, nil
	}
	return false, fmt.Errorf("ratelimit filter: %s of %d/%s is not modelled", field, v.GetNumerator(), v.GetDenominator())
}

func denominator(d typev3.FractionalPercent_DenominatorType) uint32 {
	switch d {
	case typev3.FractionalPercent_TEN_THOUSAND:
		return 10000
	case typev3.FractionalPercent_MILLION:
		return 1000000
	}
	return 100
}

// RateLimitHeaders is XRateLimitHeaderUtils::populateHeaders: from the status with the fewest
// remaining among those with a current_limit, x-ratelimit-limit (its requests_per_unit, then a
// quota policy "N;w=W[;name=...]" per status with a limit and a known unit),
// x-ratelimit-remaining and x-ratelimit-reset (whole seconds of duration_until_reset,
// truncated). A descriptor's x_ratelimit_option overrides enabled (the filter's
// enable_x_ratelimit_headers); nothing is added when the chosen status's descriptor disables
// them.
func RateLimitHeaders(ds []Descriptor, enabled bool, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) map[string]string {
	on := func(i int) bool {
		if i >= len(ds) || ds[i].XRateLimitOption == routev3.RateLimit_UNSPECIFIED {
			return enabled
		}
		return ds[i].XRateLimitOption == routev3.RateLimit_DRAFT_VERSION_03
	}
	min := -1
	for i, s := range statuses {
		if s.GetCurrentLimit() == nil {
			continue
		}
		if min < 0 || s.GetLimitRemaining() < statuses[min].GetLimitRemaining() {
			min = i
		}
	}
	if min < 0 || !on(min) {
		return nil
	}
	var policy strings.Builder
	for i, s := range statuses {
		if s.GetCurrentLimit() == nil || !on(i) {
			continue
		}
		w := unitSeconds(s.GetCurrentLimit().GetUnit())
		if w == 0 {
			continue
		}
		policy.WriteString(", " + strconv.FormatUint(uint64(s.GetCurrentLimit().GetRequestsPerUnit()), 10) + ";w=" + strconv.Itoa(w))
		if n := s.GetCurrentLimit().GetName(); n != "" {
			policy.WriteString(";name=\"" + n + "\"")
		}
	}
	m := statuses[min]
	return map[string]string{
		"x-ratelimit-limit":     strconv.FormatUint(uint64(m.GetCurrentLimit().GetRequestsPerUnit()), 10) + policy.String(),
		"x-ratelimit-remaining": strconv.FormatUint(uint64(m.GetLimitRemaining()), 10),
		"x-ratelimit-reset":     strconv.FormatInt(m.GetDurationUntilReset().GetSeconds(), 10),
	}
}

// unitSeconds is XRateLimitHeaderUtils::convertRateLimitUnit.
func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 86400
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400
	}
	return 0
}

// CheckReply is what Envoy's ext_authz filter makes of resp (Filter::onComplete): a denied
// answer is the local reply (its status, default 403; its headers and body to the client); an
// OK answer sends the request on with ok_response.headers added to it (to the upstream) and
// response_headers_to_add to the client's response. A nil resp (the call failed) is
// status_on_error (default 403) unless failure_mode_allow.
func (c *Config) CheckReply(resp *authv3.CheckResponse) (Reply, error) {
	f, _, err := c.Filters()
	if err != nil {
		return Reply{}, err
	}
	if f == nil {
		return Reply{}, errors.New("no ext_authz filter")
	}
	var r Reply
	if resp == nil {
		if !f.GetFailureModeAllow() {
			r.Status = 403
			if s := f.GetStatusOnError().GetCode(); s != 0 {
				r.Status = int(s)
			}
		}
		return r, nil
	}
	if codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		d := resp.GetDeniedResponse()
		r.Status = 403
		if s := d.GetStatus().GetCode(); s != 0 {
			r.Status = int(s)
		}
		for _, h := range d.GetHeaders() {
			r.add(&r.ClientHeaders, h.GetHeader().GetKey(), h.GetHeader().GetValue())
		}
		r.Body = d.GetBody()
		return r, nil
	}
	ok := resp.GetOkResponse()
	for _, h := range ok.GetHeaders() {
		r.add(&r.UpstreamHeaders, h.GetHeader().GetKey(), h.GetHeader().GetValue())
	}
	for _, h := range ok.GetResponseHeadersToAdd() {
		r.add(&r.ClientHeaders, h.GetHeader().GetKey(), h.GetHeader().GetValue())
	}
	return r, nil
}
