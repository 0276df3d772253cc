package descriptors

import (
	"errors"
	"strings"
	"testing"
)

func TestNewDefaults(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatalf("New(Config{}): %v", err)
	}
	if got, want := m.resourceKey, "resource"; got != want {
		t.Errorf("resourceKey = %q, want %q", got, want)
	}
	if got, want := m.originKey, "origin"; got != want {
		t.Errorf("originKey = %q, want %q", got, want)
	}
	if got, want := len(m.resource), 3; got != want {
		t.Errorf("template parts = %d, want %d ({method}, \":\", {path})", got, want)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		fields []string // every field that must be reported
	}{
		{"unknown from", Config{Authz: AuthzConfig{Origin: []Source{{From: "principal"}, {From: "headr", Name: "x"}}}},
			[]string{"authz.origin[1].from"}},
		{"missing from", Config{Authz: AuthzConfig{Params: map[string]Source{"a": {}}}},
			[]string{"authz.params.a.from"}},
		{"header without name", Config{Authz: AuthzConfig{Params: map[string]Source{"u": {From: "header"}}}},
			[]string{"authz.params.u.name"}},
		{"query without name", Config{Authz: AuthzConfig{Params: map[string]Source{"q": {From: "query"}}}},
			[]string{"authz.params.q.name"}},
		{"cookie without name", Config{Authz: AuthzConfig{Origin: []Source{{From: "cookie"}}}},
			[]string{"authz.origin[0].name"}},
		{"extension without name", Config{Authz: AuthzConfig{Params: map[string]Source{"t": {From: "context_extension"}}}},
			[]string{"authz.params.t.name"}},
		{"name on a source that takes none", Config{Authz: AuthzConfig{Params: map[string]Source{"ip": {From: "client_ip", Name: "x"}}}},
			[]string{"authz.params.ip.name"}},
		{"empty param name", Config{Authz: AuthzConfig{Params: map[string]Source{"": {From: "host"}}}},
			[]string{"authz.params"}},
		{"bad placeholder", Config{Authz: AuthzConfig{Resource: "{method}:{uri}"}}, []string{"authz.resource"}},
		{"unclosed placeholder", Config{Authz: AuthzConfig{Resource: "{method"}}, []string{"authz.resource"}},
		{"stray brace", Config{Authz: AuthzConfig{Resource: "a}b"}}, []string{"authz.resource"}},
		{"negative hops", Config{Authz: AuthzConfig{TrustedHops: -1}}, []string{"authz.trusted_hops"}},
		{"too many hops", Config{Authz: AuthzConfig{TrustedHops: MaxTrustedHops + 1}}, []string{"authz.trusted_hops"}},
		{"same keys", Config{RateLimit: RateLimitConfig{ResourceKey: "k", OriginKey: "k"}}, []string{"ratelimit.origin_key"}},
		{"same default keys", Config{RateLimit: RateLimitConfig{OriginKey: "resource"}}, []string{"ratelimit.origin_key"}},
		{"lease key is the resource key", Config{RateLimit: RateLimitConfig{LeaseKey: "resource"}}, []string{"ratelimit.lease_key"}},
		{"lease key is the origin key", Config{RateLimit: RateLimitConfig{OriginKey: "o", LeaseKey: "o"}}, []string{"ratelimit.lease_key"}},
		{"default lease key taken by the origin", Config{RateLimit: RateLimitConfig{OriginKey: "lease_id"}}, []string{"ratelimit.lease_key"}},
		{"several at once", Config{
			Authz: AuthzConfig{Resource: "{x}", Params: map[string]Source{"a": {From: "nope"}, "b": {From: "header"}}},
		}, []string{"authz.resource", "authz.params.a.from", "authz.params.b.name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(tt.cfg)
			if err == nil {
				t.Fatalf("New = %v, nil; want an error", m)
			}
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("error %v is not a *ConfigError", e)
				}
				got = append(got, ce.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.fields, ",") {
				t.Errorf("fields = %q, want %q (error: %v)", got, tt.fields, err)
			}
		})
	}
}

func TestNewAcceptsEverySource(t *testing.T) {
	cfg := Config{Authz: AuthzConfig{
		Resource: "{host}{method}{path}",
		Params: map[string]Source{
			"h": {From: "header", Name: "X-A", Split: ","}, "q": {From: "query", Name: "a"},
			"c": {From: "cookie", Name: "s"}, "ip": {From: "client_ip"}, "host": {From: "host"},
			"m": {From: "method"}, "p": {From: "path"}, "pr": {From: "principal"},
			"e": {From: "context_extension", Name: "tenant"},
		},
		TrustedHops: 2,
	}}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got, want := len(m.params), 9; got != want {
		t.Errorf("params = %d, want %d", got, want)
	}
	if got, want := m.params[0].name, "c"; got != want {
		t.Errorf("first param = %q, want %q (name order)", got, want)
	}
}
