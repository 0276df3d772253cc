package descriptors

import (
	"errors"
	"strings"
	"testing"
)

// usesOf is a Uses over fixed sets: resource -> origin read, resource -> params read.
type usesOf struct {
	origin map[string]bool
	params map[string][]string
}

func (u usesOf) UsesOrigin(resource string) bool { return u.origin[resource] }

func (u usesOf) UsesParam(resource, param string) bool {
	for _, p := range u.params[resource] {
		if p == param {
			return true
		}
	}
	return false
}

// TestWithUses: a source over a limit refuses only requests whose resource has a rule reading
// it; elsewhere it is left out and the rest is mapped as usual.
func TestWithUses(t *testing.T) {
	base, err := New(Config{Authz: AuthzConfig{
		Origin: []Source{{From: "cookie", Name: "sid"}},
		Params: map[string]Source{
			"tag":  {From: "query", Name: "tag"},
			"user": {From: "header", Name: "x-user"},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	m := base.WithUses(usesOf{
		origin: map[string]bool{"GET:/guarded": true},
		params: map[string][]string{"GET:/tagged": {"tag"}},
	})
	bigCookie := "sid=" + strings.Repeat("c", MaxLen+1)
	manyTags := "?" + strings.Repeat("tag=t&", MaxValues+1)
	tests := []struct {
		name    string
		r       req
		wantErr error
		origin  string
		params  []string // names mapped
	}{
		{"big cookie, no rule reads the origin", req{method: "GET", path: "/free", headers: map[string]string{"cookie": bigCookie, "x-user": "u"}}, nil, "", []string{"user"}},
		{"big cookie, a rule reads the origin", req{method: "GET", path: "/guarded", headers: map[string]string{"cookie": bigCookie}}, ErrValueTooLong, "", nil},
		{"many tags, no rule reads tag", req{method: "GET", path: "/free" + manyTags, headers: map[string]string{"cookie": "sid=s", "x-user": "u"}}, nil, "s", []string{"user"}},
		{"many tags, a rule reads tag", req{method: "GET", path: "/tagged" + manyTags}, ErrTooManyValues, "", nil},
		{"many tags, a rule reads another param", req{method: "GET", path: "/tagged" + manyTags + "&x", headers: map[string]string{"x-user": strings.Repeat("u", MaxLen+1)}}, ErrTooManyValues, "", nil},
		{"long user, no rule reads it", req{method: "GET", path: "/tagged?tag=a", headers: map[string]string{"x-user": strings.Repeat("u", MaxLen+1)}}, nil, "", []string{"tag"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Every case carries a source over a limit: without Uses, it is refused.
			if _, err := base.Check(tt.r.build()); err == nil {
				t.Errorf("the mapper without Uses accepts it")
			}
			e, err := m.Check(tt.r.build())
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Check error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var names []string
			for _, p := range e.Params {
				names = append(names, p.Name)
			}
			if e.Origin != tt.origin || strings.Join(names, ",") != strings.Join(tt.params, ",") {
				t.Errorf("Check = origin %q params %v, want %q %v", e.Origin, names, tt.origin, tt.params)
			}
		})
	}
}
