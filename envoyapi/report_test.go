package envoyapi

import (
	"context"
	"sync"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/audit"
	"github.com/extauthz/extauthz/policy"
)

// reports is a Reporter that keeps what it is told.
type reports struct {
	mu  sync.Mutex
	got []report
}

type report struct {
	req, resp any
	outcome   policy.Outcome
	audit     audit.Decision
	err       error
}

var _ Reporter = (*reports)(nil)

func (r *reports) Report(_ context.Context, req, resp any, v *policy.Verdict, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, report{req, resp, v.Outcome, v.Audit(), err})
}

// Each call is reported once, with its request, its answer and the verdict the answer
// renders, whose audit record says what was decided.
func TestReporter(t *testing.T) {
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
			Origin: []descriptors.Source{{From: "header", Name: "x-origin"}},
			Params: map[string]descriptors.Source{"user": {From: "header", Name: "x-user"}},
		}},
		authority: []authority.Rule{{Resource: "POST:/pay", Strategy: authority.White, Origins: []string{"checkout"}}},
		paramFlow: []hotparam.Rule{oneToken("order", "user")},
	})
	rep := &reports{}
	r.srv.reporter = rep
	ctx := context.Background()

	check := httpReq{method: "POST", path: "/pay", headers: map[string]string{"x-origin": "stranger", "x-request-id": "rid-1"}}.build()
	cresp, err := r.srv.Check(ctx, check)
	if err != nil {
		t.Fatal(err)
	}
	limit := rlReq("shop", desc("resource", "order", "user", "u"))
	lresp, err := r.srv.ShouldRateLimit(ctx, limit)
	if err != nil {
		t.Fatal(err)
	}
	want := []report{
		{check, cresp, policy.Authority, audit.Decision{API: "check", RequestID: "rid-1", Resource: "POST:/pay",
			Origin: "stranger", Result: "blocked", Reason: "authority", Rule: "authority[0]"}, nil},
		{limit, lresp, policy.Allowed, audit.Decision{API: "ratelimit", Domain: "shop", Resource: "order",
			Result: "allowed"}, nil},
	}
	if len(rep.got) != len(want) {
		t.Fatalf("%d reports, want %d: %+v", len(rep.got), len(want), rep.got)
	}
	for i, w := range want {
		g := rep.got[i]
		if g.req != w.req || g.resp != w.resp || g.outcome != w.outcome || g.audit != w.audit || g.err != w.err {
			t.Errorf("report %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if _, ok := rep.got[0].resp.(*authv3.CheckResponse); !ok {
		t.Errorf("Check reported answer %T, want *CheckResponse", rep.got[0].resp)
	}
	if _, ok := rep.got[1].resp.(*rlsv3.RateLimitResponse); !ok {
		t.Errorf("ShouldRateLimit reported answer %T, want *RateLimitResponse", rep.got[1].resp)
	}
}
