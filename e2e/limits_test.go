package e2e

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/internal/envoysim"
)

// blockBody is the JSON body the service puts in a denied answer.
type blockBody struct {
	Blocked  string `json:"blocked"`
	Resource string `json:"resource"`
	Origin   string `json:"origin"`
	Param    string `json:"param"`
	Value    string `json:"value"`
}

func TestAuthorityCheck(t *testing.T) {
	s := sharedService(t)
	withPrincipal := req("GET", "/items?item_id=a-p", "192.0.2.1")
	withPrincipal.Principal = "web"
	tests := []struct {
		name string
		r    envoysim.Request
		want int
	}{
		{"white-listed origin", req("GET", "/items?item_id=a-1", "192.0.2.1", "x-origin", "web"), 200},
		{"other white-listed origin", req("GET", "/items?item_id=a-1", "192.0.2.1", "x-origin", "mobile"), 200},
		{"unlisted origin", req("GET", "/items?item_id=a-1", "192.0.2.1", "x-origin", "stranger"), 403},
		{"no origin on a white list", req("GET", "/items?item_id=a-1", "192.0.2.1"), 403},
		{"a prefix of a listed name is not listed", req("GET", "/items?item_id=a-1", "192.0.2.1", "x-origin", "we"), 403},
		{"the mTLS principal is the origin", withPrincipal, 200},
		{"black-listed origin", req("POST", "/orders", "192.0.2.1", "x-origin", "scraper", "x-user-id", "a-u"), 403},
		{"origin not on the black list", req("POST", "/orders", "192.0.2.1", "x-origin", "web", "x-user-id", "a-u"), 200},
		{"no origin on a black list", req("POST", "/orders", "192.0.2.1", "x-user-id", "a-u2"), 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := s.check(t, tt.r)
			if got := checkCode(t, resp); got != tt.want {
				t.Fatalf("Check = %d, want %d (response %v)", got, tt.want, resp)
			}
			if tt.want == 403 {
				var b blockBody
				if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &b); err != nil {
					t.Fatalf("403 body %q is not JSON: %v", resp.GetDeniedResponse().GetBody(), err)
				}
				if b.Blocked != "authority" {
					t.Errorf("403 body blocked = %q, want authority", b.Blocked)
				}
			}
		})
	}
}

func TestAuthorityRateLimit(t *testing.T) {
	s := sharedService(t)
	tests := []struct {
		name string
		r    envoysim.Request
		want rlsv3.RateLimitResponse_Code
	}{
		{"white-listed origin", req("GET", "/items?item_id=ar-1", "192.0.2.2", "x-origin", "web"), rlsv3.RateLimitResponse_OK},
		{"unlisted origin", req("GET", "/items?item_id=ar-1", "192.0.2.2", "x-origin", "stranger"), rlsv3.RateLimitResponse_OVER_LIMIT},
		{"black-listed origin", req("POST", "/orders", "192.0.2.2", "x-origin", "scraper", "x-user-id", "ar-u"), rlsv3.RateLimitResponse_OVER_LIMIT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := s.limit(t, limitRequest(t, tt.r, false))
			if got := resp.GetOverallCode(); got != tt.want {
				t.Errorf("ShouldRateLimit = %v, want %v (%v)", got, tt.want, resp)
			}
		})
	}
}

// itemReq is a request for item on GET /items from a white-listed origin.
func itemReq(item string) envoysim.Request {
	return req("GET", "/items?item_id="+item, "192.0.2.3", "x-origin", "web")
}

// admitted sends n rate-limit calls for r one after another and counts the OK answers; it
// returns the last response and how long the calls took.
func admitted(t *testing.T, s *service, r envoysim.Request, n int) (int, *rlsv3.RateLimitResponse, time.Duration) {
	t.Helper()
	rr := limitRequest(t, r, false)
	ok := 0
	var last *rlsv3.RateLimitResponse
	start := time.Now()
	for i := 0; i < n; i++ {
		last = s.limit(t, rr)
		if last.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok, last, time.Since(start)
}

// untilRefused sends calls for r, at most n, until one is refused; it returns how many were
// admitted, the last response and how long the calls took.
func untilRefused(t *testing.T, s *service, r envoysim.Request, n int) (int, *rlsv3.RateLimitResponse, time.Duration) {
	t.Helper()
	rr := limitRequest(t, r, false)
	ok := 0
	var last *rlsv3.RateLimitResponse
	start := time.Now()
	for range n {
		last = s.limit(t, rr)
		if last.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			break
		}
		ok++
	}
	return ok, last, time.Since(start)
}

// refilled is how many tokens a rate of perSecond adds in d, rounded up: the tolerance of a
// real-time count.
func refilled(perSecond float64, d time.Duration) int {
	return int(perSecond*d.Seconds()) + 1
}

// TestItemLimitAndBurst: GET:/items item_id allows 5 a second plus a burst of 2, so 7 at once.
func TestItemLimitAndBurst(t *testing.T) {
	s := sharedService(t)
	ok, last, took := untilRefused(t, s, itemReq("lim-1"), 100)
	if last.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("%d admitted in %v and none refused, want OVER_LIMIT", ok, took)
	}
	if ok < 7 || ok > 7+refilled(5, took) {
		t.Fatalf("admitted %d in %v before the first refusal, want 7 (count 5 + burst 2) plus at most the refill", ok, took)
	}
	st := last.GetStatuses()
	if len(st) != 1 {
		t.Fatalf("statuses = %d, want one per descriptor (1)", len(st))
	}
	if got := st[0].GetCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("status code = %v, want OVER_LIMIT", got)
	}
	if got := st[0].GetCurrentLimit(); got.GetRequestsPerUnit() != 5 || got.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("current_limit = %v, want 5 per SECOND", got)
	}
	if got := st[0].GetLimitRemaining(); got != 0 {
		t.Errorf("limit_remaining = %d, want 0", got)
	}
	// Empty to full: 7 tokens at 5 a second is 1.2s to 1.4s, rounded up to whole seconds.
	if got := st[0].GetDurationUntilReset().AsDuration(); got != 2*time.Second {
		t.Errorf("duration_until_reset = %v, want 2s", got)
	}
	var retry string
	for _, h := range last.GetResponseHeadersToAdd() {
		if h.GetKey() == "retry-after" {
			retry = h.GetValue()
		}
	}
	if n, err := strconv.Atoi(retry); err != nil || n < 1 {
		t.Errorf("retry-after = %q, want a whole number of seconds >= 1", retry)
	}
}

func TestExceptionItem(t *testing.T) {
	s := sharedService(t)
	ok, _, took := admitted(t, s, itemReq("vip"), 50)
	if ok != 50 {
		t.Fatalf("exception item admitted %d of 50 in %v, want 50 (its count is 50)", ok, took)
	}
	// Its bucket refills 50 a second, so in real time the calls go on until one is refused
	// (bounded: a call takes well under the 20ms a token takes to come back).
	more, last, took2 := untilRefused(t, s, itemReq("vip"), 200)
	if last.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("exception item: %d more admitted in %v and none refused, want OVER_LIMIT", more, took2)
	}
	if limit := last.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); limit != 50 {
		t.Errorf("exception item current_limit = %d, want 50", limit)
	}
	if max := 2 + refilled(50, took+took2); more > max {
		t.Errorf("exception item admitted %d beyond 50, want at most burst 2 plus refill (%d)", more, max)
	}
	// The exception is for its value only.
	if ok, _, took := admitted(t, s, itemReq("not-vip"), 10); ok > 7+refilled(5, took) {
		t.Errorf("ordinary item admitted %d of 10, want at most 7 plus refill", ok)
	}
}

func TestRefillOverTime(t *testing.T) {
	s := sharedService(t)
	r := itemReq("refill-1")
	if ok, _, _ := admitted(t, s, r, 10); ok < 7 {
		t.Fatalf("admitted %d before the wait, want at least 7", ok)
	}
	time.Sleep(time.Second) // 5 tokens at 5 a second
	ok, _, took := admitted(t, s, r, 10)
	if ok < 4 || ok > 5+refilled(5, took) {
		t.Errorf("admitted %d after 1s, want 5 (tolerance 4 to %d)", ok, 5+refilled(5, took))
	}
}

func TestHitsAddend(t *testing.T) {
	s := sharedService(t)
	rr := func(item string, hits uint64) *rlsv3.RateLimitRequest {
		x := limitRequest(t, itemReq(item), false)
		x.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
		return x
	}
	steps := []struct {
		hits uint64
		want rlsv3.RateLimitResponse_Code
	}{
		{5, rlsv3.RateLimitResponse_OK},         // 7 -> 2
		{3, rlsv3.RateLimitResponse_OVER_LIMIT}, // 2 < 3: nothing taken
		{2, rlsv3.RateLimitResponse_OK},         // 2 -> 0
	}
	for i, st := range steps {
		if got := s.limit(t, rr("hits-1", st.hits)).GetOverallCode(); got != st.want {
			t.Fatalf("step %d: hits %d = %v, want %v", i, st.hits, got, st.want)
		}
	}
	// The request-level hits_addend applies to descriptors without their own.
	x := limitRequest(t, itemReq("hits-2"), false)
	x.HitsAddend = 8
	if got := s.limit(t, x).GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("request hits_addend 8 over a capacity of 7 = %v, want OVER_LIMIT", got)
	}
	x.HitsAddend = 7
	if got := s.limit(t, x).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("request hits_addend 7 on a full bucket of 7 = %v, want OK", got)
	}
}

// TestShadowRule: GET:/search query allows 1 a second in shadow mode: nothing is blocked.
func TestShadowRule(t *testing.T) {
	s := sharedService(t)
	r := req("GET", "/search?q=shadow-e2e", "192.0.2.50", "x-origin", "web", "user-agent", "Mozilla/5.0")
	ok, last, _ := admitted(t, s, r, 5)
	if ok != 5 {
		t.Fatalf("shadow rule: %d of 5 admitted (last %v), want all 5", ok, last)
	}
	if got := len(last.GetStatuses()); got != 2 {
		t.Errorf("statuses = %d, want 2 (remote_address and query descriptors)", got)
	}
}

// TestCheckParamFlow: GET:/reports is limited on the ext_authz path by api_key, 2 a second.
func TestCheckParamFlow(t *testing.T) {
	s := sharedService(t)
	r := req("GET", "/reports", "192.0.2.4", "x-origin", "ops", "x-api-key", "key-e2e")
	var codes []int
	for i := 0; i < 3; i++ {
		codes = append(codes, checkCode(t, s.check(t, r)))
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("Check codes = %v, want [200 200 429]", codes)
	}
	resp := s.check(t, r)
	d := resp.GetDeniedResponse()
	if got := int(d.GetStatus().GetCode()); got != 429 {
		t.Fatalf("4th Check = %d, want 429", got)
	}
	for _, h := range []string{"retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} {
		if headerOf(d.GetHeaders(), h) == "" {
			t.Errorf("429 lacks header %s (headers %v)", h, d.GetHeaders())
		}
	}
	if got := headerOf(d.GetHeaders(), "x-ratelimit-limit"); got != "2, 2;w=1" {
		t.Errorf("x-ratelimit-limit = %q, want 2, 2;w=1", got)
	}
	if got := headerOf(d.GetHeaders(), "x-ratelimit-remaining"); got != "0" {
		t.Errorf("x-ratelimit-remaining = %q, want 0", got)
	}
	var b blockBody
	if err := json.Unmarshal([]byte(d.GetBody()), &b); err != nil {
		t.Fatalf("429 body %q is not JSON: %v", d.GetBody(), err)
	}
	if b.Resource != "GET:/reports" || b.Param != "api_key" || b.Value != "key-e2e" || b.Origin != "ops" {
		t.Errorf("429 body = %+v, want resource GET:/reports, param api_key, value key-e2e, origin ops", b)
	}
}
