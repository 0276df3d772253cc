package policy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/audit"
	"github.com/extauthz/extauthz/rulestore"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

type call struct{ api, domain, resource, result string }

type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) Decision(api, domain, resource, result string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{api, domain, resource, result})
}

func (r *recorder) QueueWait(time.Duration) {}

func newSet(t *testing.T, auth []authority.Rule, params []hotparam.Rule) *rulestore.Set {
	t.Helper()
	list, err := authority.New(auth)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := hotparam.New(params, hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &rulestore.Set{Version: 1, Authority: list, ParamFlow: lim,
		Rules: rulestore.Rules{Authority: auth, ParamFlow: params}}
}

func entry(resource, origin string, params ...hotparam.Param) descriptors.Entry {
	return descriptors.Entry{Entry: hotparam.Entry{Resource: resource, Params: params}, Origin: origin}
}

// TestDecideRecordsOnceAndAudits: every outcome is recorded once, and written to the call's
// audit.Decision in that record's terms.
func TestDecideRecordsOnceAndAudits(t *testing.T) {
	set := newSet(t,
		[]authority.Rule{{Resource: "GET:/admin", Strategy: authority.White, Origins: []string{"ops"}}},
		[]hotparam.Rule{
			{Resource: "GET:/buy", Param: "item", Count: 1, Duration: time.Minute},
			{Resource: "GET:/peek", Param: "user", Count: 1, Duration: time.Minute, Shadow: true},
		})
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: rec})
	item := hotparam.Param{Name: "item", Values: []string{"7"}}
	user := hotparam.Param{Name: "user", Values: []string{"u1"}}

	tests := []struct {
		name      string
		req       Request
		wantKind  Kind
		wantCall  call
		wantAudit audit.Decision
	}{
		{"no rule", Request{API: APICheck, RequestID: "r1", Entries: []descriptors.Entry{entry("GET:/x", "web")}},
			Allow, call{APICheck, "", "", ResultOK},
			audit.Decision{API: "check", RequestID: "r1", Resource: "GET:/x", Origin: "web", Result: "allowed"}},
		{"authority", Request{API: APIRateLimit, Domain: "edge", Entries: []descriptors.Entry{entry("GET:/x", ""), entry("GET:/admin", "web")}},
			Authority, call{APIRateLimit, "edge", "GET:/admin", ResultAuthority},
			audit.Decision{API: "ratelimit", Resource: "GET:/admin", Origin: "web", Result: "blocked", Reason: "authority", Rule: "authority[0]"}},
		{"allowed, shadow would block", Request{API: APICheck, Entries: []descriptors.Entry{entry("GET:/peek", "web", user)}},
			Allow, call{APICheck, "", "", ResultOK}, // a shadow rule alone does not name the resource
			audit.Decision{API: "check", Resource: "GET:/peek", Origin: "web", Result: "allowed"}},
		{"first token", Request{API: APICheck, Entries: []descriptors.Entry{entry("GET:/buy", "web", item)}},
			Allow, call{APICheck, "", "GET:/buy", ResultOK},
			audit.Decision{API: "check", Resource: "GET:/buy", Origin: "web", Result: "allowed"}},
		{"qps", Request{API: APICheck, Entries: []descriptors.Entry{entry("GET:/buy", "web", item)}},
			ParamFlow, call{APICheck, "", "GET:/buy", ResultParamFlow},
			audit.Decision{API: "check", Resource: "GET:/buy", Origin: "web", Result: "blocked", Reason: "qps", Rule: "param_flow[0]", Param: "item", Value: "7"}},
		{"invalid", Request{API: APICheck, Err: &descriptors.RequestError{Descriptor: -1, Err: descriptors.ErrNoAttributes}},
			Invalid, call{APICheck, "", "", ResultInvalid},
			audit.Decision{API: "check", Result: "invalid", Reason: "invalid"}},
	}
	for i, tt := range tests {
		ctx, a := audit.NewContext(context.Background())
		var v Verdict
		d.Decide(ctx, &tt.req, &v)
		if v.Kind != tt.wantKind {
			t.Errorf("%s: kind %d, want %d", tt.name, v.Kind, tt.wantKind)
		}
		if len(rec.calls) != i+1 {
			t.Fatalf("%s: %d records after %d calls, want one per call", tt.name, len(rec.calls), i+1)
		}
		if got := rec.calls[i]; got != tt.wantCall {
			t.Errorf("%s: recorded %+v, want %+v", tt.name, got, tt.wantCall)
		}
		if tt.name == "allowed, shadow would block" {
			// The first call on u1 spends its only token; the shadow rule would block the second.
			if *a != tt.wantAudit {
				t.Errorf("%s: first call audit %+v, want %+v", tt.name, *a, tt.wantAudit)
			}
			ctx, a = audit.NewContext(context.Background())
			d.Decide(ctx, &tt.req, &v)
			if !v.Shadow || !a.Shadow || a.Rule != "param_flow[1]" || a.Param != "user" || a.Value != "u1" || a.Result != "allowed" {
				t.Errorf("%s: second call verdict shadow=%v, audit %+v; want a shadow block by param_flow[1] on user=u1", tt.name, v.Shadow, a)
			}
			if got, want := rec.calls[len(rec.calls)-1], (call{APICheck, "", "GET:/peek", ResultShadow}); got != want {
				t.Errorf("%s: recorded %+v, want %+v", tt.name, got, want)
			}
			rec.calls = rec.calls[:i+1]
			continue
		}
		if *a != tt.wantAudit {
			t.Errorf("%s: audit %+v, want %+v", tt.name, *a, tt.wantAudit)
		}
	}
}
