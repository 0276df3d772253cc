package rulestore

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/match"
)

// TestGolangHotspotFile: a file of the shape of sentinel-golang's own hotspot test data (every
// metricType with every controlBehavior, each with burst, queueing, duration, capacity and
// int, string and bool items) loads, each rule as sentinel-golang runs it: a Concurrency rule
// counts values in flight whatever else it gives, a Reject rule ignores maxQueueingTimeMs, a
// Throttling rule burstCount, each with a warning.
func TestGolangHotspotFile(t *testing.T) {
	opts := ParseOptions{ParamNames: []string{"p0", "p1", "p2", "p3"}}
	rules, err := Load(filepath.Join("testdata", "golang", "hotspot.json"), opts)
	if err != nil {
		t.Fatal(err)
	}
	items := func(n int64) map[string]int64 { return map[string]int64{"42": n, "guest": n - 2, "false": n - 3} }
	want := []hotparam.Rule{
		{Resource: "GET:/catalog", Param: "p0", Grade: hotparam.Concurrency, Count: 40, Duration: time.Second, Capacity: 500, Items: items(4)},
		{Resource: "GET:/catalog", Param: "p1", Grade: hotparam.Concurrency, Count: 50, Duration: time.Second, Capacity: 600, Items: items(5)},
		{Resource: "GET:/catalog", Param: "p2", Grade: hotparam.QPS, Count: 60, Duration: 3 * time.Second, Burst: 10, Capacity: 700, Items: items(6)},
		{Resource: "GET:/catalog", Param: "p3", Grade: hotparam.QPS, Behavior: hotparam.Throttle, Count: 70, Duration: 4 * time.Second,
			MaxQueueingTime: 11 * time.Millisecond, Capacity: 800, Items: items(7)},
	}
	if len(rules.ParamFlow) != len(want) {
		t.Fatalf("%d rules, want %d: %+v", len(rules.ParamFlow), len(want), rules.ParamFlow)
	}
	for i, w := range want {
		got := rules.ParamFlow[i]
		if n, ok := got.Match.(*match.Number); !ok || n.Kind != "int" || n.Bits != 64 {
			t.Errorf("rule %d: match %v, want numbers (int items)", i, got.Match)
		}
		got.Match = nil
		if !reflect.DeepEqual(got, w) {
			t.Errorf("rule %d:\n got %+v\nwant %+v", i, got, w)
		}
	}
	for _, w := range []string{
		"param_flow[0] (resource \"GET:/catalog\"): durationInSec, burstCount, maxQueueingTimeMs: ignored in this rule's mode, as sentinel-golang ignores it",
		"param_flow[1] (resource \"GET:/catalog\"): controlBehavior 1 (Throttling), durationInSec, burstCount, maxQueueingTimeMs: ignored",
		"param_flow[2] (resource \"GET:/catalog\"): maxQueueingTimeMs: ignored",
		"param_flow[3] (resource \"GET:/catalog\"): burstCount: ignored",
	} {
		if !strings.Contains(strings.Join(rules.Warnings, "\n"), w) {
			t.Errorf("warnings %q\nwant one containing %q", rules.Warnings, w)
		}
	}
}

// TestGolangHotspotRules: sentinel-golang's defaults and validity checks, rule by rule.
func TestGolangHotspotRules(t *testing.T) {
	opts := ParseOptions{ParamNames: []string{"p0", "p1"}}
	tests := []struct {
		name, doc string
		want      hotparam.Rule // when err is ""
		err       string        // field: reason, of the one error
		warning   string
	}{
		{name: "no metricType is Concurrency", doc: `{"resource": "r", "paramIndex": 1, "threshold": 3}`,
			want: hotparam.Rule{Resource: "r", Param: "p1", Grade: hotparam.Concurrency, Count: 3, Duration: time.Second}},
		{name: "no metricType, a Concurrency rule's duration is ignored", doc: `{"resource": "r", "threshold": 3, "durationInSec": 0}`,
			want:    hotparam.Rule{Resource: "r", Param: "p0", Grade: hotparam.Concurrency, Count: 3, Duration: time.Second},
			warning: "durationInSec: ignored"},
		{name: "QPS without durationInSec", doc: `{"resource": "r", "metricType": 1, "threshold": 3}`,
			err: "durationInSec: required on a QPS rule, at least 1, got 0: sentinel-golang refuses"},
		{name: "QPS with durationInSec 0", doc: `{"resource": "r", "metricType": "QPS", "threshold": 3, "durationInSec": 0}`,
			err: "durationInSec: required on a QPS rule"},
		{name: "QPS with a duration", doc: `{"resource": "r", "metricType": 1, "threshold": 3, "durationInSec": 2}`,
			want: hotparam.Rule{Resource: "r", Param: "p0", Grade: hotparam.QPS, Count: 3, Duration: 2 * time.Second}},
		{name: "paramIndex above 0 and paramKey", doc: `{"resource": "r", "paramIndex": 1, "paramKey": "user", "threshold": 3}`,
			err: "paramKey: given with paramIndex 1: sentinel-golang refuses a rule with both"},
		{name: "paramIndex 0 and paramKey", doc: `{"resource": "r", "paramIndex": 0, "paramKey": "user", "threshold": 3}`,
			want: hotparam.Rule{Resource: "r", Param: "user", Grade: hotparam.Concurrency, Count: 3, Duration: time.Second}},
		{name: "negative paramIndex and paramKey", doc: `{"resource": "r", "paramIndex": -1, "paramKey": "user", "threshold": 3}`,
			want:    hotparam.Rule{Resource: "r", Param: "user", Grade: hotparam.Concurrency, Count: 3, Duration: time.Second},
			warning: "paramIndex -1 (paramKey names the param): ignored"},
		{name: "negative burst on a Reject rule", doc: `{"resource": "r", "metricType": 1, "durationInSec": 1, "threshold": 3, "burstCount": -1}`,
			err: "burstCount: must not be negative, got -1 (sentinel-golang refuses such a rule)"},
		{name: "negative burst on a Throttling rule is ignored", doc: `{"resource": "r", "metricType": 1, "controlBehavior": 1, "durationInSec": 1, "threshold": 3, "burstCount": -1}`,
			want: hotparam.Rule{Resource: "r", Param: "p0", Grade: hotparam.QPS, Behavior: hotparam.Throttle, Count: 3, Duration: time.Second}},
		{name: "negative queueing on a Throttling rule", doc: `{"resource": "r", "metricType": 1, "controlBehavior": 1, "durationInSec": 1, "threshold": 3, "maxQueueingTimeMs": -5}`,
			err: "maxQueueingTimeMs: must not be negative, got -5"},
		{name: "paramsMaxCapacity 0 is the default", doc: `{"resource": "r", "threshold": 3, "paramsMaxCapacity": 0}`,
			want: hotparam.Rule{Resource: "r", Param: "p0", Grade: hotparam.Concurrency, Count: 3, Duration: time.Second}},
		{name: "unknown metricType", doc: `{"resource": "r", "metricType": 2, "threshold": 3}`,
			err: `metricType: unknown metric type "2"`},
		{name: "int items one after parsing: the last wins", doc: `{"resource": "r", "metricType": 1, "durationInSec": 1, "threshold": 3,
			"specificItems": [{"valKind": 0, "valStr": "007", "threshold": 9}, {"valKind": 0, "valStr": "+7", "threshold": 1}]}`,
			want: hotparam.Rule{Resource: "r", Param: "p0", Grade: hotparam.QPS, Count: 3, Duration: time.Second,
				Items: map[string]int64{"7": 1}, Match: &match.Number{Kind: "int", Bits: 64}},
			warning: `specificItems[0] ("007") and specificItems[1] ("+7") are one value (7) to sentinel-golang: the last one's threshold, 1, applies`},
		{name: "float items are rounded to five decimals", doc: `{"resource": "r", "metricType": 1, "durationInSec": 1, "threshold": 3,
			"specificItems": [{"valKind": 3, "valStr": "2.500001", "threshold": 9}]}`,
			want: hotparam.Rule{Resource: "r", Param: "p0", Grade: hotparam.QPS, Count: 3, Duration: time.Second,
				Items: map[string]int64{"2.5": 9}, Match: &match.Number{Kind: "float", Bits: 64}}},
		{name: "bool items as ParseBool reads them", doc: `{"resource": "r", "metricType": 1, "durationInSec": 1, "threshold": 3,
			"specificItems": [{"valKind": "KindBool", "valStr": "T", "threshold": 9}]}`,
			want: hotparam.Rule{Resource: "r", Param: "p0", Grade: hotparam.QPS, Count: 3, Duration: time.Second,
				Items: map[string]int64{"true": 9}},
			warning: `valStr "T" of valKind KindBool is the value "true" to sentinel-golang`},
		{name: "an int item that is no int", doc: `{"resource": "r", "metricType": 1, "durationInSec": 1, "threshold": 3,
			"specificItems": [{"valKind": 0, "valStr": "4.5", "threshold": 9}]}`,
			err: `specificItems[0].valStr: "4.5" is not a value of valKind 0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := Parse("golang.json", []byte("["+tc.doc+"]"), opts)
			if tc.err != "" {
				var errs decode.Errors
				if !errors.As(err, &errs) || len(errs) != 1 {
					t.Fatalf("err = %v, want one error %q", err, tc.err)
				}
				if got := errs[0].Field + ": " + errs[0].Reason; !strings.Contains(got, tc.err) {
					t.Errorf("error %q, want it to contain %q", got, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rules.ParamFlow) != 1 {
				t.Fatalf("rules %+v, want one", rules.ParamFlow)
			}
			if got := rules.ParamFlow[0]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("\n got %+v\nwant %+v", got, tc.want)
			}
			all := strings.Join(rules.Warnings, "\n")
			if tc.warning != "" && !strings.Contains(all, tc.warning) {
				t.Errorf("warnings %q, want one containing %q", rules.Warnings, tc.warning)
			}
			if tc.warning == "" && strings.Contains(all, "ignored") {
				t.Errorf("warnings %q, want none about ignored fields", rules.Warnings)
			}
		})
	}
}

// TestGolangNumberItems: a rule with int items limits a respelt number as the number, under its
// item's threshold, as sentinel-golang does with the int its application passes.
func TestGolangNumberItems(t *testing.T) {
	doc := `[{"resource": "r", "metricType": 1, "durationInSec": 1, "threshold": 5,
		"specificItems": [{"valKind": 0, "valStr": "7", "threshold": 1}]}]`
	rules, err := Parse("golang.json", []byte(doc), ParseOptions{ParamNames: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := hotparam.New(rules.ParamFlow, hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []bool
	for _, v := range []string{"7", "07", "+7", "8", "08"} {
		d := lim.Check(t.Context(), now, []hotparam.Entry{{Resource: "r", Hits: 1, Params: []hotparam.Param{{Name: "id", Values: []string{v}}}}}, hotparam.CheckOptions{}, nil)
		got = append(got, d.Allowed)
	}
	// 7's item admits one; 8 has the rule's five.
	if want := []bool{true, false, false, true, true}; !reflect.DeepEqual(got, want) {
		t.Errorf("7, 07, +7, 8, 08 allowed %v, want %v", got, want)
	}
}
