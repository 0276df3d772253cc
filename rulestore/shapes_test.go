package rulestore

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/match"
)

// TestImportedShapesRoundTrip: each Sentinel shape, in a fixture written from its project's
// documented format, gives the rules of its native equivalent and the same decisions.
func TestImportedShapesRoundTrip(t *testing.T) {
	opts := ParseOptions{ParamNames: []string{"item_id", "query"}}
	tests := []struct {
		imported, native string
		warnings         []string // substrings, one per expected warning beyond the native file's
	}{
		{"dashboard.json", "dashboard.native.yaml", []string{"dashboard metadata"}},
		{"golang.json", "golang.native.yaml", nil},
		{"golang.yaml", "golang.native.yaml", nil},
		{"gateway.json", "gateway.native.yaml", []string{`custom API "search_api" (path prefix "/search/", path "/find")`, "dashboard metadata",
			`"client_ip"`, `"cookie_session"`, `"gateway_route"`, `"header_x-user-id"`, `"query_item_id"`}},
	}
	for _, tc := range tests {
		t.Run(tc.imported, func(t *testing.T) {
			imp, err := Load(filepath.Join("testdata", "shapes", tc.imported), opts)
			if err != nil {
				t.Fatal(err)
			}
			nat, err := Load(filepath.Join("testdata", "shapes", tc.native), opts)
			if err != nil {
				t.Fatal(err)
			}
			// Imported authority rules compare their entries as written (Literal); the native
			// equivalent lists the same names.
			for i := range imp.Authority {
				imp.Authority[i].Literal = false
			}
			if !reflect.DeepEqual(imp.Authority, nat.Authority) {
				t.Errorf("authority rules:\n got %+v\nwant %+v", imp.Authority, nat.Authority)
			}
			if len(imp.ParamFlow) != len(nat.ParamFlow) {
				t.Fatalf("%d param-flow rules, want %d", len(imp.ParamFlow), len(nat.ParamFlow))
			}
			for i := range nat.ParamFlow {
				a, b := imp.ParamFlow[i], nat.ParamFlow[i]
				a.Match, b.Match = nil, nil
				if !reflect.DeepEqual(a, b) {
					t.Errorf("param_flow[%d]:\n got %+v\nwant %+v", i, a, b)
				}
				// Typed items compare values as numbers (Number); the native equivalent's items
				// are written canonically, so it decides alike.
				if _, typed := imp.ParamFlow[i].Match.(*match.Number); typed && nat.ParamFlow[i].Match == nil {
					continue
				}
				if (imp.ParamFlow[i].Match == nil) != (nat.ParamFlow[i].Match == nil) {
					t.Errorf("param_flow[%d]: match %v, want %v", i, imp.ParamFlow[i].Match, nat.ParamFlow[i].Match)
				}
			}
			extra := imp.Warnings[len(nat.Warnings):]
			if len(extra) != len(tc.warnings) {
				t.Errorf("warnings %q, want %d more than the native file's", imp.Warnings, len(tc.warnings))
			}
			for i, w := range tc.warnings {
				if i < len(extra) && !strings.Contains(extra[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, extra[i], w)
				}
			}
			if a, b := decisions(t, imp), decisions(t, nat); a != b {
				t.Errorf("decisions differ:\nimported %s\n  native %s", a, b)
			}
		})
	}
}

// decisions runs one sequence of requests, over every rule's resource and param, through a
// limiter of rules, and returns the decisions as text.
func decisions(t *testing.T, rules Rules) string {
	t.Helper()
	lim, err := hotparam.New(rules.ParamFlow, hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	values := []string{"vip", "1001", "42", "vip-7", "bot-x", "abc", "123", "x-bot-y"}
	var b strings.Builder
	now := time.Unix(1700000000, 0)
	for step := range 40 {
		for _, r := range rules.ParamFlow {
			v := values[step%len(values)]
			e := []hotparam.Entry{{Resource: r.Resource, Params: []hotparam.Param{{Name: r.Param, Values: []string{v}}}}}
			d := lim.Check(context.Background(), now, e, hotparam.CheckOptions{}, nil)
			fmt.Fprintf(&b, "%s/%s=%s:%v,%v;", r.Resource, r.Param, v, d.Allowed, d.Wait)
		}
		now = now.Add(37 * time.Millisecond)
	}
	return b.String()
}

// TestMatch covers the native match field and its limits.
func TestMatch(t *testing.T) {
	tests := []struct {
		yaml    string
		match   []string
		nomatch []string
		err     string
	}{
		{yaml: `{exact: "a"}`, match: []string{"a"}, nomatch: []string{"ab", ""}},
		{yaml: `{prefix: "vip-"}`, match: []string{"vip-", "vip-1"}, nomatch: []string{"vi", "xvip-"}},
		{yaml: `{contains: "bot"}`, match: []string{"bot", "a-bot-b"}, nomatch: []string{"bo"}},
		{yaml: `{regex: "^[0-9]+$"}`, match: []string{"1", "123"}, nomatch: []string{"a1", ""}},
		{yaml: `{regex: "[0-9]"}`, match: []string{"a1"}, nomatch: []string{"ab"}},
		{yaml: `{regex: "("}`, err: "match.regex: invalid regex"},
		{yaml: `{regex: "(a{1,1000}){1,1000}"}`, err: "match.regex: "},
		{yaml: `{regex: "` + strings.Repeat("a", match.MaxRegexLen+1) + `"}`, err: "bytes long"},
		{yaml: `{prefix: "a", exact: "b"}`, err: "exactly one"},
		{yaml: `{}`, err: "exactly one"},
		{yaml: `{prefx: "a"}`, err: `did you mean "prefix"`},
		{yaml: `{exact: ""}`, err: "must not be empty"},
	}
	for _, tc := range tests {
		t.Run(tc.yaml[:min(len(tc.yaml), 30)], func(t *testing.T) {
			rules, err := Parse("r.yaml", []byte("param_flow: [{resource: r, param: p, count: 1, match: "+tc.yaml+"}]"), ParseOptions{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := rules.ParamFlow[0].Match
			for _, v := range tc.match {
				if !m.Match(v) {
					t.Errorf("%v does not match %q", m, v)
				}
			}
			for _, v := range tc.nomatch {
				if m.Match(v) {
					t.Errorf("%v matches %q", m, v)
				}
			}
		})
	}
}
