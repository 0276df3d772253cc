package rulestore

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDescribeRoundTrip: what Report prints for a rule is native syntax that parses back to the
// same rule.
func TestDescribeRoundTrip(t *testing.T) {
	opts := ParseOptions{ParamNames: []string{"item_id", "query"}, ClusterEnabled: true}
	for _, f := range []string{"shapes/dashboard.json", "shapes/golang.yaml", "shapes/gateway.json", "valid/rules.yaml", "valid/domains.yaml", "valid/budget.yaml"} {
		path := filepath.Join("testdata", f)
		rules, err := Load(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		lines, problems := Report(path, opts)
		if problems != 0 {
			t.Fatalf("%s: %d problems: %q", f, problems, lines)
		}
		var native strings.Builder
		native.WriteString("authority:\n")
		n := 0
		for _, l := range lines {
			if _, rest, ok := strings.Cut(l, "-> authority: "); ok {
				native.WriteString("  - " + rest + "\n")
				n++
			}
		}
		native.WriteString("param_flow:\n")
		for _, l := range lines {
			if _, rest, ok := strings.Cut(l, "-> param_flow: "); ok {
				native.WriteString("  - " + rest + "\n")
				n++
			}
		}
		if n != len(rules.Authority)+len(rules.ParamFlow) {
			t.Errorf("%s: %d mapped lines for %d rules:\n%s", f, n, len(rules.Authority)+len(rules.ParamFlow), strings.Join(lines, "\n"))
		}
		back, err := Parse("back.yaml", []byte(native.String()), opts)
		if err != nil {
			t.Fatalf("%s: the mapped lines do not parse: %v\n%s", f, err, native.String())
		}
		if a, b := decisions(t, back), decisions(t, rules); a != b {
			t.Errorf("%s: the mapped rules decide differently", f)
		}
		for i := range rules.ParamFlow {
			if DescribeParamFlow(back.ParamFlow[i]) != DescribeParamFlow(rules.ParamFlow[i]) {
				t.Errorf("%s: param_flow[%d] reads back as %s, want %s", f, i, DescribeParamFlow(back.ParamFlow[i]), DescribeParamFlow(rules.ParamFlow[i]))
			}
		}
	}
}

func TestDurationText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 10 * time.Second: "10s", time.Minute: "1m", 90 * time.Minute: "1h30m",
		time.Hour: "1h", 500 * time.Millisecond: "500ms", 1500 * time.Millisecond: "1.5s", 0: "0s",
	} {
		if got := durationText(d); got != want {
			t.Errorf("durationText(%v) = %q, want %q", d, got, want)
		}
	}
}
