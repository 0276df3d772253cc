package hotparam

import (
	"testing"
	"time"
)

func TestNamesAndReads(t *testing.T) {
	a := Rule{Resource: "a", Param: "user", Count: 1, Duration: time.Second}
	b := Rule{Resource: "a", Param: "ip", Domain: "d", Count: 1, Duration: time.Second}
	l := mustNew(t, a, b)
	tests := []struct {
		resource, param string
		names, reads    bool
	}{
		{"a", "user", true, true},
		{"a", "ip", true, true}, // a rule of a domain too
		{"a", "other", true, false},
		{"b", "user", false, false},
	}
	for _, tt := range tests {
		if got := l.Names(tt.resource); got != tt.names {
			t.Errorf("Names(%q) = %v, want %v", tt.resource, got, tt.names)
		}
		if got := l.Reads(tt.resource, tt.param); got != tt.reads {
			t.Errorf("Reads(%q, %q) = %v, want %v", tt.resource, tt.param, got, tt.reads)
		}
	}
	var none *Limiter
	if none.Names("a") || none.Reads("a", "user") {
		t.Error("a nil Limiter names or reads something")
	}
}
