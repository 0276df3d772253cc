package admin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/redact"
	"github.com/extauthz/extauthz/rulestore"
)

// A sensitive param's values, counted and named in a rule's items, are shown only as their
// keyed hash by /hot, /rules and /console/data.
func TestSensitiveValuesShownHashed(t *testing.T) {
	const rules = `
param_flow:
  - resource: "POST:/orders"
    param: api_key
    grade: qps
    count: 1
    duration: 1s
    items:
      - {value: "sk-vip-7", count: 100}
  - resource: "GET:/items"
    param: item_id
    grade: qps
    count: 5
    duration: 1s
`
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := rulestore.New(rulestore.Options{File: file, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(nil, []byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{
		Rules:  store.Current,
		Top:    func(n int) []hotparam.RuleTop { return store.Current().ParamFlow.Top(now, n) },
		Redact: red.Value,
		Now:    clock,
	})
	for _, e := range []hotparam.Entry{
		{Resource: "POST:/orders", Params: []hotparam.Param{{Name: "api_key", Values: []string{"sk-live-42"}}}},
		{Resource: "POST:/orders", Params: []hotparam.Param{{Name: "api_key", Values: []string{"sk-live-42"}}}},
		{Resource: "GET:/items", Params: []hotparam.Param{{Name: "item_id", Values: []string{"item-9"}}}},
	} {
		store.Current().ParamFlow.Check(context.Background(), now, []hotparam.Entry{e}, hotparam.CheckOptions{}, nil)
	}
	for _, tc := range []struct {
		target string
		want   []string
	}{
		{"/hot", []string{red.Hash("sk-live-42"), "item-9"}},
		{"/rules", []string{red.Hash("sk-vip-7")}},
		{"/console/data", []string{red.Hash("sk-live-42"), red.Hash("sk-vip-7"), "item-9"}},
	} {
		_, _, body := get(t, h, tc.target)
		for _, secret := range []string{"sk-live-42", "sk-vip-7"} {
			if strings.Contains(body, secret) {
				t.Errorf("GET %s shows %q in clear: %s", tc.target, secret, body)
			}
		}
		for _, want := range tc.want {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s lacks %q: %s", tc.target, want, body)
			}
		}
	}
}
