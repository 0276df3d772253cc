package hotparam

import (
	"encoding"
	"encoding/json"
	"fmt"
	"testing"
)

type textEnum interface {
	fmt.Stringer
	encoding.TextMarshaler
}

func TestEnumSpellings(t *testing.T) {
	for _, tc := range []struct {
		v    textEnum
		want string
		back func([]byte) (any, error)
	}{
		{QPS, "qps", func(b []byte) (any, error) { var v Grade; err := v.UnmarshalText(b); return v, err }},
		{Concurrency, "concurrency", func(b []byte) (any, error) { var v Grade; err := v.UnmarshalText(b); return v, err }},
		{Reject, "reject", func(b []byte) (any, error) { var v Behavior; err := v.UnmarshalText(b); return v, err }},
		{Throttle, "throttle", func(b []byte) (any, error) { var v Behavior; err := v.UnmarshalText(b); return v, err }},
		{ReasonNone, "none", func(b []byte) (any, error) { var v Reason; err := v.UnmarshalText(b); return v, err }},
		{ReasonQPS, "qps", func(b []byte) (any, error) { var v Reason; err := v.UnmarshalText(b); return v, err }},
		{ReasonThrottle, "throttle", func(b []byte) (any, error) { var v Reason; err := v.UnmarshalText(b); return v, err }},
		{ReasonConcurrency, "concurrency", func(b []byte) (any, error) { var v Reason; err := v.UnmarshalText(b); return v, err }},
		{FallbackLocal, "local", func(b []byte) (any, error) { var v Fallback; err := v.UnmarshalText(b); return v, err }},
		{FallbackAllow, "allow", func(b []byte) (any, error) { var v Fallback; err := v.UnmarshalText(b); return v, err }},
		{FallbackDeny, "deny", func(b []byte) (any, error) { var v Fallback; err := v.UnmarshalText(b); return v, err }},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.v, got, tc.want)
		}
		text, err := tc.v.MarshalText()
		if err != nil || string(text) != tc.want {
			t.Errorf("%#v.MarshalText() = %q, %v", tc.v, text, err)
		}
		if back, err := tc.back(text); err != nil || back != any(tc.v) {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", text, back, err, tc.v)
		}
	}
}

func TestEnumTextErrorsAndDefaults(t *testing.T) {
	var g Grade = Concurrency
	if err := g.UnmarshalText(nil); err != nil || g != QPS {
		t.Errorf("empty grade: %v %v, want the default qps", g, err)
	}
	var b Behavior
	if err := b.UnmarshalText([]byte("Throttle")); err == nil {
		t.Error("a misspelt behavior was accepted")
	}
	if _, err := Grade(7).MarshalText(); err == nil || Grade(7).String() != "Grade(7)" {
		t.Errorf("unknown grade: %q, %v", Grade(7).String(), err)
	}
	// as JSON map keys and values, through encoding.TextMarshaler
	out, err := json.Marshal(map[Reason]Fallback{ReasonThrottle: FallbackDeny})
	if err != nil || string(out) != `{"throttle":"deny"}` {
		t.Errorf("JSON: %s, %v", out, err)
	}
}
