package e2e

import (
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// headersRules: a burst rule on a whole-second duration, a rule on a duration that is no
// whole unit (5 per 2s), and an ext_authz rule.
const headersRules = `
param_flow:
  - {resource: "GET:/items", param: item_id, count: 5, duration: 1s, burst: 2}
  - {resource: "GET:/search", param: remote_address, count: 5, duration: 2s}
  - {resource: "GET:/reports", param: api_key, count: 2, duration: 1s}
  - {resource: "GET:/downloads", param: user, grade: concurrency, count: 2}
`

// envoyXRateLimit builds the x-ratelimit-* headers from a rate-limit answer as Envoy's
// ratelimit filter does (XRateLimitHeaderUtils::populateHeaders, with
// enable_x_ratelimit_headers: DRAFT_VERSION_03): the status with the smallest limit_remaining
// among those with a current_limit gives the limit, the remaining and the reset (the seconds of
// duration_until_reset only); every status whose unit has a window adds ", N;w=W;name=..."
// (convertRateLimitUnit: UNKNOWN has none). ok is false when no status has a current_limit.
func envoyXRateLimit(resp *rlsv3.RateLimitResponse) (limit, remaining, reset string, ok bool) {
	windows := map[rlsv3.RateLimitResponse_RateLimit_Unit]int{
		rlsv3.RateLimitResponse_RateLimit_SECOND: 1,
		rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
		rlsv3.RateLimitResponse_RateLimit_HOUR:   3600,
		rlsv3.RateLimitResponse_RateLimit_DAY:    86400,
	}
	var min *rlsv3.RateLimitResponse_DescriptorStatus
	for _, s := range resp.GetStatuses() {
		if s.GetCurrentLimit() == nil {
			continue
		}
		if min == nil || s.GetLimitRemaining() < min.GetLimitRemaining() {
			min = s
		}
	}
	if min == nil {
		return "", "", "", false
	}
	var policy strings.Builder
	for _, s := range resp.GetStatuses() {
		cl := s.GetCurrentLimit()
		if cl == nil || windows[cl.GetUnit()] == 0 {
			continue
		}
		policy.WriteString(", " + strconv.Itoa(int(cl.GetRequestsPerUnit())) + ";w=" + strconv.Itoa(windows[cl.GetUnit()]))
		if cl.GetName() != "" {
			policy.WriteString(`;name="` + cl.GetName() + `"`)
		}
	}
	return strconv.Itoa(int(min.GetCurrentLimit().GetRequestsPerUnit())) + policy.String(),
		strconv.Itoa(int(min.GetLimitRemaining())),
		strconv.FormatInt(min.GetDurationUntilReset().GetSeconds(), 10), true
}

// TestRateLimitHeadersAsEnvoyBuildsThem: what a client reads from the headers Envoy builds out of
// the rate-limit answers is self-consistent: remaining never above limit (burst), reset rounded
// up to whole seconds, and a w= window only for a duration that is one whole unit.
func TestRateLimitHeadersAsEnvoyBuildsThem(t *testing.T) {
	s := newService(t, []byte(headersRules))

	// 5 a second plus a burst of 2: the bucket holds 7; after one request 6 are left, and the
	// headers say 5 of 5. Full again 200ms later: reset 1 (rounded up).
	resp := s.limit(t, limitRequest(t, itemReq("hdr-1"), false))
	st := resp.GetStatuses()[0]
	if d := st.GetDurationUntilReset(); d.GetSeconds() != 1 || d.GetNanos() != 0 {
		t.Errorf("duration_until_reset = %v, want exactly 1s (rounded up once, by the service)", d.AsDuration())
	}
	want := [3]string{`5, 5;w=1;name="param_flow[0] GET:/items item_id"`, "5", "1"}
	if l, r, z, ok := envoyXRateLimit(resp); !ok || [3]string{l, r, z} != want {
		t.Errorf("first request: headers %q %q %q, want %q", l, r, z, want)
	}
	// Spend the rest: remaining counts down to 0 and never exceeds the limit on the way.
	for i := 0; i < 6; i++ {
		resp = s.limit(t, limitRequest(t, itemReq("hdr-1"), false))
		l, r, _, _ := envoyXRateLimit(resp)
		n, _ := strconv.Atoi(r)
		if !strings.HasPrefix(l, "5, ") || n > 5 {
			t.Fatalf("request %d: limit %q remaining %q, want remaining <= 5", i+2, l, r)
		}
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("7th request refused, want the burst to admit it")
	}
	resp = s.limit(t, limitRequest(t, itemReq("hdr-1"), false))
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("8th request admitted, want OVER_LIMIT")
	}
	// Refused: under one token left, so 1.2s to 1.4s until full, rounded up.
	if _, r, z, _ := envoyXRateLimit(resp); r != "0" || z != "2" {
		t.Errorf("refused: remaining %q reset %q, want 0 and 2", r, z)
	}

	// 5 per 2s is no whole unit: the limit is stated as the 5 the remaining counts down from,
	// without a window (UNKNOWN), never as 150 per MINUTE.
	resp = s.limit(t, limitRequest(t, req("GET", "/search?q=x", "192.0.2.77"), false))
	var cl *rlsv3.RateLimitResponse_RateLimit
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() != nil {
			cl = st.GetCurrentLimit()
		}
	}
	if cl.GetRequestsPerUnit() != 5 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		t.Errorf("5 per 2s: current_limit %v, want 5 UNKNOWN", cl)
	}
	want = [3]string{"5", "4", "1"}
	if l, r, z, ok := envoyXRateLimit(resp); !ok || [3]string{l, r, z} != want {
		t.Errorf("5 per 2s: headers %q %q %q, want %q", l, r, z, want)
	}

	// Concurrency: the most in flight, no window, the free slots, reset 0.
	for i, want := range [][3]string{{"2", "1", "0"}, {"2", "0", "0"}} {
		resp = s.limit(t, limitRequest(t, downloadReq("hdr", "hdr-"+strconv.Itoa(i)), false))
		if l, r, z, ok := envoyXRateLimit(resp); !ok || [3]string{l, r, z} != want {
			t.Errorf("concurrency acquire %d: headers %q %q %q, want %q", i+1, l, r, z, want)
		}
	}
}

// TestCheckHeadersReachTheClient: on an allowed Check the x-ratelimit-* headers are in
// response_headers_to_add (to the client), none go upstream; a 429 carries the same values.
func TestCheckHeadersReachTheClient(t *testing.T) {
	s := newService(t, []byte(headersRules))
	r := req("GET", "/reports", "192.0.2.4", "x-origin", "ops", "x-api-key", "key-hdr")
	for i, wantRemaining := range []string{"1", "0"} {
		ok := s.check(t, r).GetOkResponse()
		if ok == nil {
			t.Fatalf("Check %d refused, want allowed", i+1)
		}
		if len(ok.GetHeaders()) != 0 {
			t.Errorf("Check %d: headers %v sent upstream, want none", i+1, ok.GetHeaders())
		}
		got := [3]string{headerOf(ok.GetResponseHeadersToAdd(), "x-ratelimit-limit"),
			headerOf(ok.GetResponseHeadersToAdd(), "x-ratelimit-remaining"),
			headerOf(ok.GetResponseHeadersToAdd(), "x-ratelimit-reset")}
		if want := [3]string{"2, 2;w=1", wantRemaining, "1"}; got != want {
			t.Errorf("Check %d: client headers %q, want %q", i+1, got, want)
		}
	}
	d := s.check(t, r).GetDeniedResponse()
	if d == nil || int(d.GetStatus().GetCode()) != 429 {
		t.Fatalf("3rd Check: %v, want 429", d)
	}
	got := [4]string{headerOf(d.GetHeaders(), "x-ratelimit-limit"), headerOf(d.GetHeaders(), "x-ratelimit-remaining"),
		headerOf(d.GetHeaders(), "x-ratelimit-reset"), headerOf(d.GetHeaders(), "retry-after")}
	// Empty: full again within 1s, a token within 0.5s; both rounded up.
	if want := [4]string{"2, 2;w=1", "0", "1", "1"}; got != want {
		t.Errorf("429 headers (limit, remaining, reset, retry-after) %q, want %q", got, want)
	}
}
