package redisstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

func TestSlot(t *testing.T) {
	// values from the Redis Cluster specification and CLUSTER KEYSLOT
	tests := []struct {
		key  string
		want uint16
	}{
		{"123456789", 12739},
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363},    // empty first tag: the whole key is hashed
		{"foo{{bar}}zap", 4015}, // the tag is "{bar"
		{"foo{bar}{zap}", 5061}, // the first tag only
	}
	for _, tt := range tests {
		if got := slot(tt.key); got != tt.want {
			t.Errorf("slot(%q): got %d, want %d", tt.key, got, tt.want)
		}
	}
}

func TestKey(t *testing.T) {
	long := strings.Repeat("x", maxRawTag+1)
	tests := []struct {
		op   hotparam.RemoteOp
		want string
	}{
		{hotparam.RemoteOp{RuleID: "r1", Value: "item-42"}, "p:{item-42}:r1:B"},
		{hotparam.RemoteOp{RuleID: "r1", Value: "item-42", Behavior: hotparam.Throttle}, "p:{item-42}:r1:T"},
		{hotparam.RemoteOp{RuleID: "r1", Value: "item-42", Grade: hotparam.Concurrency}, "p:{item-42}:r1:c"},
		{hotparam.RemoteOp{RuleID: "r1", Value: "a}b"}, "p:{#" + hashHex("a}b") + "}:r1:B"},
		{hotparam.RemoteOp{RuleID: "r1", Value: ""}, "p:{#" + hashHex("") + "}:r1:B"},
		{hotparam.RemoteOp{RuleID: "r1", Value: "#x"}, "p:{#" + hashHex("#x") + "}:r1:B"},
		{hotparam.RemoteOp{RuleID: "r1", Value: long}, "p:{#" + hashHex(long) + "}:r1:B"},
	}
	for _, tt := range tests {
		if got := key("p", &tt.op); got != tt.want {
			t.Errorf("key(%q, %q): got %q, want %q", tt.op.RuleID, tt.op.Value, got, tt.want)
		}
	}
	a := hotparam.RemoteOp{RuleID: "rule-a", Value: "v1"}
	b := hotparam.RemoteOp{RuleID: "rule-b", Value: "v1", Grade: hotparam.Concurrency}
	if slot(key("p", &a)) != slot(key("p", &b)) {
		t.Error("two rules of one value must share a slot")
	}
}

func hashHex(v string) string { return tag(v)[1:] }

func TestCheckOp(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name   string
		op     hotparam.RemoteOp
		err    bool
		range_ bool
	}{
		{"ordinary", hotparam.RemoteOp{Count: 100, Burst: 10, Duration: sec}, false, false},
		{"count 0", hotparam.RemoteOp{Count: 0, Duration: sec}, false, false},
		{"negative count", hotparam.RemoteOp{Count: -1, Duration: sec}, true, false},
		{"negative burst", hotparam.RemoteOp{Count: 1, Burst: -1, Duration: sec}, true, false},
		{"sub-microsecond duration", hotparam.RemoteOp{Count: 1, Duration: 999}, true, false},
		{"capacity*duration too big", hotparam.RemoteOp{Count: 1<<30 + 3, Duration: 1000 * sec}, true, true},
		{"count too big", hotparam.RemoteOp{Count: MaxCount + 1, Duration: time.Microsecond}, true, true},
		{"a million per day", hotparam.RemoteOp{Count: 1e6, Duration: 24 * time.Hour}, false, false},
		{"a billion per second", hotparam.RemoteOp{Count: 1e9, Duration: sec}, false, false},
		{"coprime count and duration", hotparam.RemoteOp{Count: 1 << 26, Duration: 86400001 * time.Microsecond}, true, true},
		{"throttle hits*duration too big", hotparam.RemoteOp{Behavior: hotparam.Throttle, Count: 1, Hits: 1 << 40, Duration: sec}, true, true},
		{"throttle max wait*count too big", hotparam.RemoteOp{Behavior: hotparam.Throttle, Count: 1<<20 + 1, MaxWait: 2 * time.Hour, Duration: sec}, true, true},
		{"throttle max wait within", hotparam.RemoteOp{Behavior: hotparam.Throttle, Count: 1<<20 + 1, MaxWait: time.Hour, Duration: sec}, false, false},
		{"concurrency", hotparam.RemoteOp{Grade: hotparam.Concurrency, Count: 1000, Lease: time.Minute}, false, false},
		{"concurrency count too big", hotparam.RemoteOp{Grade: hotparam.Concurrency, Count: MaxConcurrentCount + 1}, true, true},
		{"concurrency sub-microsecond lease", hotparam.RemoteOp{Grade: hotparam.Concurrency, Count: 1, Lease: 10}, true, false},
	}
	for _, tt := range tests {
		err := CheckOp(tt.op)
		if (err != nil) != tt.err {
			t.Errorf("%s: got error %v, want error %v", tt.name, err, tt.err)
		}
		if got := errors.Is(err, ErrOutOfRange); got != tt.range_ {
			t.Errorf("%s: errors.Is(%v, ErrOutOfRange) got %v, want %v", tt.name, err, got, tt.range_)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string // "" when valid
	}{
		{"standalone", Config{Addrs: []string{"127.0.0.1:6379"}}, ""},
		{"cluster", Config{Addrs: []string{"a:1", "b:2"}, Mode: "cluster"}, ""},
		{"no address", Config{}, "addrs"},
		{"not host:port", Config{Addrs: []string{"localhost"}}, "addrs[0]"},
		{"standalone with two", Config{Addrs: []string{"a:1", "b:2"}}, "addrs"},
		{"unknown mode", Config{Addrs: []string{"a:1"}, Mode: "sentinel"}, "mode"},
		{"negative timeout", Config{Addrs: []string{"a:1"}, Timeout: -1}, "timeout"},
		{"brace in prefix", Config{Addrs: []string{"a:1"}, Prefix: "x{y"}, "prefix"},
		{"negative failures", Config{Addrs: []string{"a:1"}, BreakerFailures: -1}, "breaker_failures"},
		{"negative cooldown", Config{Addrs: []string{"a:1"}, BreakerCooldown: -1}, "breaker_cooldown"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		var ce *ConfigError
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%s: got %v, want nil", tt.name, err)
		case tt.field != "" && !errors.As(err, &ce):
			t.Errorf("%s: got %v, want a *ConfigError on %s", tt.name, err, tt.field)
		case tt.field != "" && ce.Field != tt.field:
			t.Errorf("%s: got field %q, want %q", tt.name, ce.Field, tt.field)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New with an invalid config: got nil error")
	}
}
