package rulestore

import (
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
)

func TestConfigWarnings(t *testing.T) {
	mapped := &descriptors.Config{
		Authz:     descriptors.AuthzConfig{Origin: []descriptors.Source{{From: "header", Name: "x-origin"}}, Params: map[string]descriptors.Source{"user": {From: "header", Name: "x-user"}}},
		RateLimit: descriptors.RateLimitConfig{LeaseKey: "lease_id"},
	}
	noOrigin := &descriptors.Config{Authz: descriptors.AuthzConfig{Params: mapped.Authz.Params}}
	tests := []struct {
		name    string
		mapping *descriptors.Config
		rules   string
		want    []string // one substring per warning, in order
	}{
		{"all mapped", mapped, "authority: [{resource: a, strategy: white, origins: [x]}]\nparam_flow: [{resource: a, param: user, count: 1}]", nil},
		{"no mapping known", nil, "authority: [{resource: a, strategy: white, origins: [x]}]\nparam_flow: [{resource: a, param: other, count: 1}]", nil},
		{"authority without an origin source", noOrigin, "authority: [{resource: a, strategy: white, origins: [x]}]", []string{"no origin source is configured (authz.origin)"}},
		{"unmapped param", mapped, "param_flow: [{resource: a, param: user, count: 1}, {resource: b, param: item, count: 1}, {resource: c, param: item, count: 2}]",
			[]string{`no authz.params source produces the params "item" (param_flow[1]): Check calls never carry them`}},
		{"concurrency and refund need the lease key", mapped, "param_flow: [{resource: a, param: user, grade: concurrency, count: 1}, {resource: b, param: user, count: 1, refund: true}]",
			[]string{ConcurrencyWarning, `concurrency and refund rules (param_flow[0], param_flow[1]) act only on rate-limit calls that carry the lease key "lease_id"`}},
		{"white and black on one resource", nil, "authority: [{resource: a, strategy: white, origins: [x]}, {resource: a, strategy: black, origins: [z]}, {resource: b, strategy: black, origins: [z]}]",
			[]string{`authority (resource "a"): white and black rules on one resource`}},
		{"a mapped gateway param needs no note", &descriptors.Config{Authz: descriptors.AuthzConfig{Params: map[string]descriptors.Source{"client_ip": {From: "client_ip"}}}},
			`[{"resource": "r", "resourceMode": 0, "count": 1, "paramItem": {"parseStrategy": 0}}]`, nil},
		{"an unmapped gateway param gets the note saying what to add", mapped,
			`[{"resource": "r", "resourceMode": 0, "count": 1, "paramItem": {"parseStrategy": 0}}]`, []string{"add authz.params.client_ip: {from: client_ip}"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := Parse("r.yaml", []byte(tc.rules), ParseOptions{Mapping: tc.mapping})
			if err != nil {
				t.Fatal(err)
			}
			if len(rules.Warnings) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", rules.Warnings, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(rules.Warnings[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, rules.Warnings[i], w)
				}
			}
		})
	}
}

// TestLeaseOnRefundRules: a qps rule takes a lease only with refund: true.
func TestLeaseOnRefundRules(t *testing.T) {
	rules, err := Parse("r.yaml", []byte("param_flow: [{resource: a, param: p, count: 1, refund: true, lease: 30s}]"), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rules.ParamFlow[0].Lease; got != 30*time.Second {
		t.Errorf("lease = %v, want 30s", got)
	}
	if _, err := Parse("r.yaml", []byte("param_flow: [{resource: a, param: p, count: 1, lease: 30s}]"), ParseOptions{}); err == nil {
		t.Error("a lease on a qps rule without refund parsed")
	}
}

func TestUses(t *testing.T) {
	set := &Set{Rules: Rules{
		Authority: []authority.Rule{{Resource: "GET:/a"}},
		ParamFlow: []hotparam.Rule{{Resource: "GET:/b", Param: "user"}},
	}}
	u := Uses{Current: func() *Set { return set }}
	if !u.UsesOrigin("GET:/a") || u.UsesOrigin("GET:/b") {
		t.Error("UsesOrigin: want only the resource with an authority rule")
	}
	if !u.UsesParam("GET:/b", "user") || u.UsesParam("GET:/b", "tag") || u.UsesParam("GET:/a", "user") {
		t.Error("UsesParam: want only the resource and param of a param-flow rule")
	}
	none := Uses{Current: func() *Set { return nil }}
	if !none.UsesOrigin("x") || !none.UsesParam("x", "y") {
		t.Error("without rules every source must count as used")
	}
}
