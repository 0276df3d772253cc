package rulestore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
)

// Report checks the rules file at path as a load does and returns what `extauthz validate`
// prints for it, one line each: every problem (addressed by file, rule and field); or every
// warning ("warning: ..."), one line per rule saying what it maps to in the native format
// ("file: param_flow[0] -> {resource: ..., ...}"), and a summary ("file: ok: ..."). problems
// counts the problem lines.
func Report(path string, opts ParseOptions) (lines []string, problems int) {
	data, err := load(path)
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, path) {
			msg = path + ": " + msg
		}
		return []string{msg}, 1
	}
	rules, pos, err := checkPos(path, data, opts)
	if err != nil {
		var verrs decode.Errors
		if errors.As(err, &verrs) {
			for _, ve := range verrs {
				lines = append(lines, ve.Error())
			}
			return lines, len(verrs)
		}
		return []string{err.Error()}, 1
	}
	for _, w := range rules.Warnings {
		lines = append(lines, "warning: "+w)
	}
	for i, r := range rules.Authority {
		lines = append(lines, fmt.Sprintf("%s: %s[%d] -> authority: %s", pos.place(path, decode.SectionAuthority, i), decode.SectionAuthority, i, DescribeAuthority(r)))
	}
	for i, r := range rules.ParamFlow {
		lines = append(lines, fmt.Sprintf("%s: %s[%d] -> param_flow: %s", pos.place(path, decode.SectionParamFlow, i), decode.SectionParamFlow, i, DescribeParamFlow(r)))
	}
	lines = append(lines, fmt.Sprintf("%s: ok: %d authority rules, %d param_flow rules", path, len(rules.Authority), len(rules.ParamFlow)))
	return lines, 0
}

// DescribeAuthority writes an authority rule in the native format, on one line (YAML flow
// style).
func DescribeAuthority(r authority.Rule) string {
	strategy, missing := "white", ""
	if r.Strategy == authority.Black {
		strategy = "black"
	}
	switch r.MissingOrigin {
	case authority.MissingDeny:
		missing = ", missing_origin: deny"
	case authority.MissingAllow:
		missing = ", missing_origin: allow"
	}
	origins := make([]string, len(r.Origins))
	for i, o := range r.Origins {
		origins[i] = strconv.Quote(o)
	}
	literal := ""
	if r.Literal {
		literal = ", literal: true" // without it an entry written like an address matches addresses
	}
	return fmt.Sprintf("{resource: %q, strategy: %s, origins: [%s]%s%s}", r.Resource, strategy, strings.Join(origins, ", "), missing, literal)
}

// DescribeParamFlow writes a param-flow rule in the native format, on one line (YAML flow
// style), leaving out fields at their defaults.
func DescribeParamFlow(r hotparam.Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{resource: %q", r.Resource)
	if r.Domain != "" {
		fmt.Fprintf(&b, ", domain: %q", r.Domain)
	}
	fmt.Fprintf(&b, ", param: %q", r.Param)
	if r.Grade == hotparam.Concurrency {
		b.WriteString(", grade: concurrency")
	}
	fmt.Fprintf(&b, ", count: %d", r.Count)
	if r.Grade == hotparam.QPS {
		fmt.Fprintf(&b, ", duration: %s", durationText(r.Duration))
	}
	if r.Burst != 0 {
		fmt.Fprintf(&b, ", burst: %d", r.Burst)
	}
	if r.Behavior == hotparam.Throttle {
		fmt.Fprintf(&b, ", behavior: throttle, max_queueing_time: %s", durationText(r.MaxQueueingTime))
	}
	if len(r.Items) > 0 {
		keys := make([]string, 0, len(r.Items))
		for k := range r.Items {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteString(", items: [")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{value: %q, count: %d}", k, r.Items[k])
		}
		b.WriteString("]")
	}
	if r.Lease != 0 {
		fmt.Fprintf(&b, ", lease: %s", durationText(r.Lease))
	}
	if r.Capacity != 0 {
		fmt.Fprintf(&b, ", capacity: %d", r.Capacity)
	}
	if r.Postpaid {
		b.WriteString(", charge: postpaid")
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{r.Refund, "refund"}, {r.Cluster, "cluster"}, {r.Shadow, "shadow"}} {
		if f.on {
			fmt.Fprintf(&b, ", %s: true", f.name)
		}
	}
	if r.Match != nil {
		if m, ok := r.Match.(fmt.Stringer); ok {
			fmt.Fprintf(&b, ", match: {%s}", m)
		} else {
			b.WriteString(", match: (set)")
		}
	}
	b.WriteString("}")
	return b.String()
}

// durationText writes d as the native format does: "1s", "500ms", "1m", "1h30m".
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
