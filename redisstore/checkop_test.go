package redisstore_test

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/redisstore"
)

// A Limiter refuses at load a cluster rule the store cannot count exactly, and takes the same
// rule when it is local. The store need not be reachable.
func TestLimiterRefusesRuleOutOfRange(t *testing.T) {
	s, err := redisstore.New(redisstore.Config{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tests := []struct {
		name string
		rule hotparam.Rule
		ok   bool
	}{
		{"a billion a second", hotparam.Rule{Resource: "r", Param: "p", Count: 1e9, Duration: time.Second}, true},
		{"count past the store's range", hotparam.Rule{Resource: "r", Param: "p", Count: redisstore.MaxCount + 1, Duration: time.Second}, false},
		{"an exception past the range", hotparam.Rule{Resource: "r", Param: "p", Count: 5, Duration: time.Second,
			Items: map[string]int64{"big": 2 * redisstore.MaxCount}}, false},
		{"a sub-microsecond duration", hotparam.Rule{Resource: "r", Param: "p", Count: 1, Duration: 500 * time.Nanosecond}, false},
		{"concurrency past the range", hotparam.Rule{Resource: "r", Param: "p", Grade: hotparam.Concurrency,
			Count: redisstore.MaxConcurrentCount + 1}, false},
	}
	for _, tt := range tests {
		rule := tt.rule
		rule.Cluster = true
		_, err := hotparam.New([]hotparam.Rule{rule}, hotparam.Options{Remote: s})
		if (err == nil) != tt.ok {
			t.Errorf("%s: New = %v, want ok %v", tt.name, err, tt.ok)
		}
		rule.Cluster = false
		if _, err := hotparam.New([]hotparam.Rule{rule}, hotparam.Options{Remote: s}); err != nil && tt.ok {
			t.Errorf("%s as a local rule: %v", tt.name, err)
		}
	}
}
