package rulestore_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/extauthz/extauthz/rulestore"
)

func ExampleParse() {
	data := []byte(`
authority:
  - resource: "GET:/hello"
    strategy: white
    origins: [serviceA, "10.1.0.0/16"]
param_flow:
  - resource: "POST:/order"
    param: item_id
    count: 5
    items:
      - {value: "4343433", count: 1000}
  - resource: "POST:/upload"
    param: tenant
    grade: concurrency
    count: 2
    duratoin: 1s
    burst: 1
`)
	_, err := rulestore.Parse("rules.yaml", data, rulestore.ParseOptions{})
	fmt.Println(err)

	// Sentinel's JSON: paramIdx names a param through ParamNames.
	sentinel := []byte(`[{"resource": "POST:/order", "limitApp": "default", "grade": 1,
		"paramIdx": 1, "count": 5, "durationInSec": 2}]`)
	rules, err := rulestore.Parse("rules.json", sentinel, rulestore.ParseOptions{ParamNames: []string{"user", "item_id"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := rules.ParamFlow[0]
	fmt.Println(r.Resource, r.Param, r.Count, r.Duration)
	// Output:
	// rules.yaml:16:5: param_flow[1] (resource "POST:/upload"): duratoin: unknown field (did you mean "duration"?)
	// rules.yaml:17:5: param_flow[1] (resource "POST:/upload"): burst: applies only to qps rules, not to concurrency rules
	// POST:/order item_id 5 2s
}

func ExampleNew() {
	dir, err := os.MkdirTemp("", "rules")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	write := func(s string) { _ = os.WriteFile(path, []byte(s), 0o644) }

	write("param_flow: [{resource: \"POST:/order\", param: item_id, count: 5}]\n")
	s, err := rulestore.New(rulestore.Options{File: path})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("version", s.Current().Version, "count", s.Current().Rules.ParamFlow[0].Count)

	write("param_flow: [{resource: \"POST:/order\", param: item_id, count: 10}]\n")
	_ = s.Reload()
	fmt.Println("version", s.Current().Version, "count", s.Current().Rules.ParamFlow[0].Count)

	write("param_flow: [{resource: \"POST:/order\", param: item_id, count: -1}]\n")
	_ = s.Reload()
	fmt.Println("version", s.Current().Version, "count", s.Current().Rules.ParamFlow[0].Count, "rejected:", s.LastError() != nil)
	// Output:
	// version 1 count 5
	// version 2 count 10
	// version 2 count 10 rejected: true
}
