package envoy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// seqHeader marks each request a test sends, so that what reached the upstream can be told
// apart per request (Envoy passes it through untouched).
const seqHeader = "x-test-seq"

// protocols are the client protocols every scenario runs over.
var protocols = []struct {
	name string
	c    *http.Client
}{{"h1", h1}, {"h2", h2}}

// reached returns the requests the upstream recorded whose seqHeader has the value seq.
func (s *stack) reached(seq string) []envoytest.Request {
	var out []envoytest.Request
	for _, r := range s.up.Requests() {
		if r.Header.Get(seqHeader) == seq {
			out = append(out, r)
		}
	}
	return out
}

// refusal is the JSON body extauthz gives a refused request (through either filter).
type refusal struct {
	Blocked  string `json:"blocked"`
	Resource string `json:"resource"`
	Origin   string `json:"origin"`
	Param    string `json:"param"`
	Value    string `json:"value"`
	Reason   string `json:"reason"`
}

func decodeRefusal(t *testing.T, a answer) refusal {
	t.Helper()
	if ct := a.header.Get("content-type"); ct != "application/json" {
		t.Errorf("content-type of the %d = %q, want application/json", a.status, ct)
	}
	var r refusal
	if err := json.Unmarshal([]byte(a.body), &r); err != nil {
		t.Fatalf("the %d's body %q: %v", a.status, a.body, err)
	}
	return r
}

// rateHeaders reads x-ratelimit-limit's first number, remaining and reset, and checks that
// remaining never exceeds the limit.
func rateHeaders(t *testing.T, a answer) (limit, remaining, reset int) {
	t.Helper()
	l := a.header.Get("x-ratelimit-limit")
	first, _, _ := strings.Cut(l, ",")
	var err error
	if limit, err = strconv.Atoi(strings.TrimSpace(first)); err != nil {
		t.Fatalf("x-ratelimit-limit %q: %v", l, err)
	}
	if remaining, err = strconv.Atoi(a.header.Get("x-ratelimit-remaining")); err != nil {
		t.Fatalf("x-ratelimit-remaining %q: %v", a.header.Get("x-ratelimit-remaining"), err)
	}
	if reset, err = strconv.Atoi(a.header.Get("x-ratelimit-reset")); err != nil {
		t.Fatalf("x-ratelimit-reset %q: %v", a.header.Get("x-ratelimit-reset"), err)
	}
	if remaining > limit {
		t.Errorf("x-ratelimit-remaining %d above x-ratelimit-limit %d", remaining, limit)
	}
	return limit, remaining, reset
}

// burst sends method path until the first answer other than 200 (at most max requests),
// and returns the 200s, the refusal, and how long the run took. Every 200 must have reached
// the upstream once with the client's headers; the refusal must not have.
func (s *stack) burst(t *testing.T, c *http.Client, max int, path string, kv ...string) (ok []answer, refused answer, took time.Duration) {
	t.Helper()
	start := time.Now()
	for i := 0; i < max; i++ {
		seq := fmt.Sprintf("%s-%d-%d", t.Name(), time.Now().UnixNano(), i)
		a := s.do(c, "GET", path, append([]string{seqHeader, seq}, kv...)...)
		got := s.reached(seq)
		if a.status != http.StatusOK {
			if len(got) != 0 {
				t.Errorf("the refused request %d (%d) reached the upstream: %v", i, a.status, got)
			}
			return ok, a, time.Since(start)
		}
		if len(got) != 1 || got[0].Path != path {
			t.Fatalf("allowed request %d: the upstream saw %v, want one %s", i, got, path)
		}
		for j := 0; j+1 < len(kv); j += 2 {
			want := kv[j+1]
			if strings.EqualFold(kv[j], "x-origin") {
				want = "" // the client-asserted identity: the allowed Check removes it
			}
			if v := got[0].Header.Get(kv[j]); v != want {
				t.Errorf("upstream %s = %q, want %q", kv[j], v, want)
			}
		}
		for k := range got[0].Header {
			if strings.HasPrefix(strings.ToLower(k), "x-ratelimit") {
				t.Errorf("the upstream got %s: the x-ratelimit headers are for the client", k)
			}
		}
		ok = append(ok, a)
	}
	t.Fatalf("%s: %d requests, none refused", path, max)
	return
}

// allowedBound is the most requests a bucket of capacity refilled at rate per second can
// admit in took: what a slow machine may add to the exact count.
func allowedBound(capacity int, rate float64, took time.Duration) int {
	return capacity + int(rate*took.Seconds()) + 1
}

// TestExtAuthzAllowAuthorityHotParam runs GET /reports (white list web, ops; 2 a second per
// x-api-key, on the ext_authz path) through Envoy over HTTP/1.1 and HTTP/2.
func TestExtAuthzAllowAuthorityHotParam(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			checks := s.checks()
			key := "key-" + p.name
			ok, refused, took := s.burst(t, p.c, 20, "/reports", "x-origin", "web", "x-api-key", key)
			if len(ok) < 2 || len(ok) > allowedBound(2, 2, took) {
				t.Errorf("allowed %d in %v, want 2 (count 2 a second, no burst)", len(ok), took)
			}
			for i, a := range ok {
				limit, remaining, reset := rateHeaders(t, a)
				if limit != 2 || a.header.Get("x-ratelimit-limit") != "2, 2;w=1" {
					t.Errorf("allow %d: x-ratelimit-limit %q, want \"2, 2;w=1\"", i, a.header.Get("x-ratelimit-limit"))
				}
				if i < 2 && remaining != 1-i {
					t.Errorf("allow %d: remaining %d, want %d", i, remaining, 1-i)
				}
				if reset < 0 || reset > 1 {
					t.Errorf("allow %d: reset %d, want 0..1", i, reset)
				}
			}
			if refused.status != http.StatusTooManyRequests {
				t.Fatalf("after the allowance: %d %q, want 429", refused.status, refused.body)
			}
			if got := refused.header.Get("retry-after"); got != "1" {
				t.Errorf("429 retry-after %q, want 1", got)
			}
			if _, remaining, _ := rateHeaders(t, refused); remaining != 0 {
				t.Errorf("429 remaining %d, want 0", remaining)
			}
			if refused.header.Get("x-envoy-ratelimited") != "" {
				t.Error("a 429 of ext_authz carries x-envoy-ratelimited, which only the ratelimit filter sets")
			}
			r := decodeRefusal(t, refused)
			want := refusal{Blocked: "param_flow", Resource: "GET:/reports", Origin: "web", Param: "api_key", Value: key, Reason: "qps"}
			if r != want {
				t.Errorf("429 body %+v, want %+v", r, want)
			}

			// An origin off the white list: 403, whatever its key.
			seq := "denied-" + p.name
			a := s.do(p.c, "GET", "/reports", "x-origin", "partner", "x-api-key", "other-"+p.name, seqHeader, seq)
			if a.status != http.StatusForbidden {
				t.Fatalf("origin partner: %d %q, want 403", a.status, a.body)
			}
			if r := decodeRefusal(t, a); r.Blocked != "authority" || r.Origin != "partner" || r.Reason != "not_in_white_list" {
				t.Errorf("403 body %+v, want authority / partner / not_in_white_list", r)
			}
			if a.header.Get("x-ratelimit-limit") != "" || a.header.Get("retry-after") != "" {
				t.Errorf("403 carries rate-limit headers: %v", a.header)
			}
			if got := s.reached(seq); len(got) != 0 {
				t.Errorf("the 403 reached the upstream: %v", got)
			}
			if got, want := s.checks()-checks, int64(len(ok)+2); got != want {
				t.Errorf("%d Check calls for %d requests", got, want)
			}
		})
	}
}

// TestRateLimitAllowAuthorityHotParam runs GET /items?item_id=N (white list web, mobile on
// the ext_authz path; 5 a second with a burst of 2 per item_id on the rate-limit path)
// through Envoy over HTTP/1.1 and HTTP/2.
func TestRateLimitAllowAuthorityHotParam(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			st := s.envoy.Stats(t)
			item := "item-" + p.name
			path := "/items?item_id=" + item
			ok, refused, took := s.burst(t, p.c, 40, path, "x-origin", "mobile")
			if len(ok) < 7 || len(ok) > allowedBound(7, 5, took) {
				t.Errorf("allowed %d in %v, want 7 (count 5 and a burst of 2)", len(ok), took)
			}
			const limit = `5, 5;w=1;name="param_flow[0] GET:/items item_id"`
			for i, a := range ok {
				_, remaining, _ := rateHeaders(t, a)
				if got := a.header.Get("x-ratelimit-limit"); got != limit {
					t.Errorf("allow %d: x-ratelimit-limit %q, want %q", i, got, limit)
				}
				// The burst is headroom the headers do not advertise: 5 of 5 until fewer than 5
				// tokens are left (a refill on a slow run can only add).
				if want := min(5, 6-i); remaining < want || remaining > 5 {
					t.Errorf("allow %d: remaining %d, want %d", i, remaining, want)
				}
			}
			if refused.status != http.StatusTooManyRequests {
				t.Fatalf("after the allowance: %d %q, want 429", refused.status, refused.body)
			}
			if refused.header.Get("x-envoy-ratelimited") != "true" {
				t.Errorf("429 of the ratelimit filter without x-envoy-ratelimited: %v", refused.header)
			}
			if got := refused.header.Get("x-ratelimit-limit"); got != limit {
				t.Errorf("429 x-ratelimit-limit %q, want %q", got, limit)
			}
			if _, remaining, reset := rateHeaders(t, refused); remaining != 0 || reset < 1 {
				t.Errorf("429 remaining %d reset %d, want 0 and at least 1", remaining, reset)
			}
			if got := refused.header.Get("retry-after"); got != "1" {
				t.Errorf("429 retry-after %q, want 1", got)
			}
			r := decodeRefusal(t, refused)
			want := refusal{Blocked: "param_flow", Resource: "GET:/items", Origin: "mobile", Param: "item_id", Value: item, Reason: "qps"}
			if r != want {
				t.Errorf("429 body %+v, want %+v", r, want)
			}
			after := s.envoy.Stats(t)
			rl := func(k string) int64 {
				name := "cluster.upstream.ratelimit.extauthz_rl." + k
				return after[name] - st[name]
			}
			if rl("ok") != int64(len(ok)) || rl("over_limit") != 1 || rl("error") != 0 {
				t.Errorf("ratelimit stats ok %d over_limit %d error %d, want %d 1 0", rl("ok"), rl("over_limit"), rl("error"), len(ok))
			}

			// Off the white list: ext_authz answers 403 and the ratelimit filter is never asked.
			before := s.envoy.Stats(t)
			seq := "denied-" + p.name
			a := s.do(p.c, "GET", path, "x-origin", "scraper", seqHeader, seq)
			if a.status != http.StatusForbidden {
				t.Fatalf("origin scraper: %d %q, want 403", a.status, a.body)
			}
			if r := decodeRefusal(t, a); r.Blocked != "authority" || r.Resource != "GET:/items" || r.Origin != "scraper" {
				t.Errorf("403 body %+v, want authority on GET:/items for scraper", r)
			}
			if got := s.reached(seq); len(got) != 0 {
				t.Errorf("the 403 reached the upstream: %v", got)
			}
			after = s.envoy.Stats(t)
			for _, k := range []string{"ok", "over_limit", "error"} {
				name := "cluster.upstream.ratelimit.extauthz_rl." + k
				if after[name] != before[name] {
					t.Errorf("%s moved for a request ext_authz refused", name)
				}
			}

			// Without item_id the route's descriptor is not produced: not limited.
			for i := 0; i < 10; i++ {
				if a := s.do(p.c, "GET", "/items", "x-origin", "web"); a.status != http.StatusOK {
					t.Fatalf("GET /items without item_id %d: %d %q, want 200", i, a.status, a.body)
				}
			}
		})
	}
}
