package envoyapi

import (
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// dstatus is a DescriptorStatus in brief; limit nil means no current_limit.
type dstatus struct {
	code      rlsv3.RateLimitResponse_Code
	limit     *limit
	remaining uint32
	reset     time.Duration
}

type limit struct {
	perUnit uint32
	unit    rlsv3.RateLimitResponse_RateLimit_Unit
	name    string
}

func brief(resp *rlsv3.RateLimitResponse) []dstatus {
	var out []dstatus
	for _, s := range resp.GetStatuses() {
		d := dstatus{code: s.GetCode(), remaining: s.GetLimitRemaining(), reset: s.GetDurationUntilReset().AsDuration()}
		if cl := s.GetCurrentLimit(); cl != nil {
			d.limit = &limit{cl.GetRequestsPerUnit(), cl.GetUnit(), cl.GetName()}
		}
		out = append(out, d)
	}
	return out
}

func sameStatuses(t *testing.T, label string, got, want []dstatus) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d statuses, want %d", label, len(got), len(want))
		return
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.code != w.code || g.remaining != w.remaining || g.reset != w.reset || (g.limit == nil) != (w.limit == nil) ||
			(g.limit != nil && *g.limit != *w.limit) {
			gl, wl := limit{}, limit{}
			if g.limit != nil {
				gl = *g.limit
			}
			if w.limit != nil {
				wl = *w.limit
			}
			t.Errorf("%s: status %d = %v %+v rem %d reset %v, want %v %+v rem %d reset %v",
				label, i, g.code, gl, g.remaining, g.reset, w.code, wl, w.remaining, w.reset)
		}
	}
}

func TestRateLimitAnswers(t *testing.T) {
	r := newRig(t, rigConfig{
		authority: []authority.Rule{{Resource: "pay", Strategy: authority.White, Origins: []string{"checkout"}}},
		paramFlow: []hotparam.Rule{
			{Resource: "order", Param: "item", Count: 3, Duration: time.Minute},
			{Resource: "order", Param: "user", Count: 90, Duration: 90 * time.Second},
			{Resource: "pay", Param: "user", Count: 1, Duration: time.Second},
		},
	})
	order := func(item, user string) *ratelimitv3.RateLimitDescriptor {
		return desc("resource", "order", "item", item, "user", user)
	}
	itemLimit := &limit{3, rlsv3.RateLimitResponse_RateLimit_MINUTE, "param_flow[0] order item"}
	payLimit := &limit{1, rlsv3.RateLimitResponse_RateLimit_SECOND, "param_flow[2] pay user"}

	// A descriptor no rule applies to is OK without current_limit.
	resp, err := r.rls.ShouldRateLimit(ctx(t), rlReq("shop", order("i1", "u1"), desc("resource", "none", "user", "u1")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != ok {
		t.Fatalf("overall %v, want OK", resp.GetOverallCode())
	}
	// item: 3 per minute, 2 left, full again in 20s. user: 90 per 90s is 1 per second,
	// stated per DAY (86400), 89 left, full in 1s. The tighter (fewer left) is item's.
	sameStatuses(t, "first", brief(resp), []dstatus{{ok, itemLimit, 2, 20 * time.Second}, {code: ok}})
	if got, want := r.rec.last(), (decision{policy.APIRateLimit, "shop", "order", policy.Allowed}); got != want {
		t.Errorf("recorded %+v, want %+v", got, want)
	}

	// All or nothing: the second descriptor blocks (pay, one per second), the first spends no
	// token of item i1: 1s later it has 2.05 tokens, full again in 19s.
	r.clock.Advance(time.Second)
	resp, err = r.rls.ShouldRateLimit(ctx(t), rlReq("shop", desc("resource", "pay", "origin", "checkout", "user", "p")))
	if err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("pay: %v, %v; want OK", resp, err)
	}
	sameStatuses(t, "pay", brief(resp), []dstatus{{ok, payLimit, 0, time.Second}})
	resp, err = r.rls.ShouldRateLimit(ctx(t), rlReq("shop", order("i1", "u2"), desc("resource", "pay", "origin", "checkout", "user", "p")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != over {
		t.Fatalf("overall %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	sameStatuses(t, "blocked", brief(resp), []dstatus{{ok, itemLimit, 2, 19 * time.Second}, {over, payLimit, 0, time.Second}})
	b := decodeBody(t, string(resp.GetRawBody()))
	if want := (body{Blocked: "param_flow", Rule: 2, Resource: "pay", Origin: "checkout", Param: "user", Value: "p", Reason: "qps"}); b != want {
		t.Errorf("body %+v, want %+v", b, want)
	}
	if h := respHeaders(resp); h[HeaderRetryAfter] != "1" || h[HeaderContentType] != "application/json" {
		t.Errorf("response headers %v, want retry-after 1 and JSON", h)
	}
	if got, want := r.rec.last(), (decision{policy.APIRateLimit, "shop", "pay", policy.ParamFlow}); got != want {
		t.Errorf("recorded %+v, want %+v", got, want)
	}

	// An authority block: OVER_LIMIT on its descriptor, nothing spent anywhere.
	r.clock.Advance(time.Second)
	resp, err = r.rls.ShouldRateLimit(ctx(t), rlReq("shop", order("i1", "u3"), desc("resource", "pay", "origin", "stranger", "user", "p")))
	if err != nil {
		t.Fatal(err)
	}
	sameStatuses(t, "authority", brief(resp), []dstatus{{code: ok}, {code: over}})
	if resp.GetOverallCode() != over {
		t.Errorf("overall %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	if b := decodeBody(t, string(resp.GetRawBody())); b.Blocked != "authority" || b.Origin != "stranger" || b.Reason != "not_in_white_list" {
		t.Errorf("body %+v, want an authority block of stranger", b)
	}
	if got, want := r.rec.last(), (decision{policy.APIRateLimit, "shop", "pay", policy.Authority}); got != want {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
	// Item i1 has 2 tokens plus what 2s refilled (3 per minute: 0.1 token); this call spends
	// one: 1 whole token left.
	resp, err = r.rls.ShouldRateLimit(ctx(t), rlReq("other", order("i1", "u4")))
	if err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("after blocks: %v, %v; want OK", resp, err)
	}
	if got, want := resp.GetStatuses()[0].GetLimitRemaining(), uint32(1); got != want {
		t.Errorf("item i1 remaining %d, want %d (blocked calls spent nothing)", got, want)
	}
	if got := r.rec.last().domain; got != "other" {
		t.Errorf("recorded domain %q, want other", got)
	}
}

func respHeaders(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

// TestRateLimitHits: hits_addend on the request, overridden per descriptor; negative hits give
// back concurrency.
func TestRateLimitHits(t *testing.T) {
	r := newRig(t, rigConfig{paramFlow: []hotparam.Rule{
		{Resource: "q", Param: "k", Count: 10, Duration: time.Second},
		{Resource: "c", Param: "k", Grade: hotparam.Concurrency, Count: 2},
	}})
	withHits := func(d *ratelimitv3.RateLimitDescriptor, hits uint64, negative bool) *ratelimitv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(hits)
		d.IsNegativeHits = negative
		return d
	}
	concLimit := &limit{2, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, "param_flow[1] c k"}
	steps := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want []dstatus
	}{
		{"request hits", &rlsv3.RateLimitRequest{HitsAddend: 4, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("resource", "q", "k", "a")}},
			[]dstatus{{ok, &limit{10, rlsv3.RateLimitResponse_RateLimit_SECOND, "param_flow[0] q k"}, 6, time.Second}}},
		{"descriptor hits override", &rlsv3.RateLimitRequest{HitsAddend: 4, Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("resource", "q", "k", "a"), 5, false)}},
			[]dstatus{{ok, &limit{10, rlsv3.RateLimitResponse_RateLimit_SECOND, "param_flow[0] q k"}, 1, time.Second}}},
		{"more than left", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("resource", "q", "k", "a"), 2, false)}},
			[]dstatus{{over, &limit{10, rlsv3.RateLimitResponse_RateLimit_SECOND, "param_flow[0] q k"}, 1, time.Second}}},
		{"negative hits ignored by a qps rule", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("resource", "q", "k", "a"), 5, true)}},
			[]dstatus{{code: ok}}},
		{"acquire 1", rlReq("d", desc("resource", "c", "k", "x")), []dstatus{{ok, concLimit, 1, 0}}},
		{"acquire 2", rlReq("d", desc("resource", "c", "k", "x")), []dstatus{{ok, concLimit, 0, 0}}},
		{"acquire 3 blocked", rlReq("d", desc("resource", "c", "k", "x")), []dstatus{{over, concLimit, 0, 0}}},
		{"release", rlReq("d", withHits(desc("resource", "c", "k", "x"), 1, true)), []dstatus{{ok, concLimit, 1, 0}}},
		{"acquire again", rlReq("d", desc("resource", "c", "k", "x")), []dstatus{{ok, concLimit, 0, 0}}},
		{"release two at once", rlReq("d", withHits(desc("resource", "c", "k", "x"), 2, true)), []dstatus{{ok, concLimit, 2, 0}}},
	}
	for _, s := range steps {
		resp, err := r.rls.ShouldRateLimit(ctx(t), s.req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		sameStatuses(t, s.name, brief(resp), s.want)
		wantOverall := ok
		for _, w := range s.want {
			if w.code == over {
				wantOverall = over
			}
		}
		if resp.GetOverallCode() != wantOverall {
			t.Errorf("%s: overall %v, want %v", s.name, resp.GetOverallCode(), wantOverall)
		}
		if wantOverall == over {
			if b := decodeBody(t, string(resp.GetRawBody())); b.Reason != "qps" && b.Reason != "concurrency" {
				t.Errorf("%s: body %+v", s.name, b)
			}
		}
	}
}

func TestRateLimitShadow(t *testing.T) {
	rule := hotparam.Rule{Resource: "r", Param: "k", Count: 1, Duration: time.Second, Shadow: true}
	r := newRig(t, rigConfig{paramFlow: []hotparam.Rule{rule}})
	for i, want := range []policy.Outcome{policy.Allowed, policy.Shadow} {
		resp, err := r.rls.ShouldRateLimit(ctx(t), rlReq("dom", desc("resource", "r", "k", "v")))
		if err != nil || resp.GetOverallCode() != ok {
			t.Fatalf("call %d: %v, %v; want OK", i, resp, err)
		}
		if got := r.rec.last(); got.result != want || got.domain != "dom" {
			t.Errorf("call %d: recorded %+v, want result %q domain dom", i, got, want)
		}
	}
}

func TestRateLimitMalformed(t *testing.T) {
	r := newRig(t, rigConfig{paramFlow: []hotparam.Rule{{Resource: "r", Param: "k", Count: 1, Duration: time.Second}}})
	many := make([]*ratelimitv3.RateLimitDescriptor, 5000)
	for i := range many {
		many[i] = desc("resource", "r", "k", "v")
	}
	bigDesc := &ratelimitv3.RateLimitDescriptor{}
	for range descriptors.MaxEntries + 1 {
		bigDesc.Entries = append(bigDesc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	long := strings.Repeat("v", descriptors.MaxLen+1)
	hugeHits := desc("resource", "r", "k", "v")
	hugeHits.HitsAddend = wrapperspb.UInt64(1 << 63)
	tests := []struct {
		name     string
		req      *rlsv3.RateLimitRequest
		wantCode codes.Code
		want     []dstatus // when answered
		wantErr  string    // in the body
	}{
		{"empty request", &rlsv3.RateLimitRequest{}, codes.OK, nil, "no descriptors"},
		{"no descriptors", rlReq("d"), codes.OK, nil, "no descriptors"},
		{"thousands of descriptors", rlReq("d", many...), codes.OK, allOver(len(many)), "too many descriptors"},
		{"too many entries", rlReq("d", desc("resource", "r"), bigDesc), codes.OK, []dstatus{{code: ok}, {code: over}}, "descriptors[1].entries: too many entries"},
		{"empty key", rlReq("d", desc("resource", "r", "", "v")), codes.OK, []dstatus{{code: over}}, "descriptors[0].entries[1].key: empty key"},
		{"key too long", rlReq("d", desc("resource", "r", long, "v")), codes.OK, []dstatus{{code: over}}, "descriptors[0].entries[1].key: key too long"},
		{"domain too long", rlReq(long, desc("resource", "r"), desc("resource", "r")), codes.OK, allOver(2), "domain: value too long"},
		{"hits too large", rlReq("d", hugeHits), codes.OK, []dstatus{{code: over}}, "hits_addend too large"},
		{"value too long", rlReq("d", desc("resource", "r", "k", "a"), desc("resource", "r", "k", long)), codes.OK,
			[]dstatus{{code: ok}, {code: over}}, "descriptors[1].entries[1].value"},
	}
	for _, tt := range tests {
		resp, err := r.rls.ShouldRateLimit(ctx(t), tt.req)
		if got := status.Code(err); got != tt.wantCode {
			t.Errorf("%s: error %v, want code %v", tt.name, err, tt.wantCode)
			continue
		}
		if got := r.rec.last().result; got != policy.Invalid {
			t.Errorf("%s: recorded %q, want %q", tt.name, got, policy.Invalid)
		}
		if err != nil {
			continue
		}
		if resp.GetOverallCode() != over {
			t.Errorf("%s: overall %v, want OVER_LIMIT", tt.name, resp.GetOverallCode())
		}
		sameStatuses(t, tt.name, brief(resp), tt.want)
		if b := decodeBody(t, string(resp.GetRawBody())); !strings.Contains(b.Error, tt.wantErr) {
			t.Errorf("%s: body error %q, want it to say %q", tt.name, b.Error, tt.wantErr)
		}
	}
	// Nothing was spent by the refused calls: the one token of value v is still there.
	resp, err := r.rls.ShouldRateLimit(ctx(t), rlReq("d", desc("resource", "r", "k", "v")))
	if err != nil || resp.GetOverallCode() != ok {
		t.Errorf("after refused calls: %v, %v; want OK", resp, err)
	}
	if resp, err := r.srv.ShouldRateLimit(ctx(t), nil); err != nil || resp.GetOverallCode() != over {
		t.Errorf("ShouldRateLimit(nil) = %v, %v; want OVER_LIMIT", resp, err)
	}
}

func allOver(n int) []dstatus {
	s := make([]dstatus, n)
	for i := range s {
		s[i].code = over
	}
	return s
}

func TestRateLimitNoRules(t *testing.T) {
	r := newRig(t, rigConfig{noRules: true})
	resp, err := r.rls.ShouldRateLimit(ctx(t), rlReq("d", desc("resource", "x"), desc("a", "b")))
	if err != nil || resp.GetOverallCode() != ok || len(resp.GetStatuses()) != 2 {
		t.Errorf("ShouldRateLimit with no rule set = %v, %v; want OK with 2 statuses", resp, err)
	}
}
