package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/redisstore"
)

// failingRemote is a shared store that is always down.
type failingRemote struct{}

func (failingRemote) Eval(context.Context, []hotparam.RemoteOp, []hotparam.RemoteResult) error {
	return errors.New("down")
}

// Each fallback policy counts the checks it answered under its own name.
func TestFallbacksCounted(t *testing.T) {
	rules := []hotparam.Rule{{Resource: "r", Param: "p", Count: 1, Duration: time.Hour, Cluster: true}}
	entry := []hotparam.Entry{{Resource: "r", Params: []hotparam.Param{{Name: "p", Values: []string{"v"}}}}}
	rem, err := redisstore.New(redisstore.Config{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	for _, policy := range []string{"local", "allow", "deny"} {
		m := metrics.New(metrics.Options{NoRuntime: true})
		opts := limiterOptions(config.RedisConfig{Fallback: policy}, 0, rem, m)
		if opts.OnFallback == nil || opts.Remote == nil {
			t.Fatalf("%s: options without a remote or a fallback hook: %+v", policy, opts)
		}
		opts.Remote = failingRemote{}
		l, err := hotparam.New(rules, opts)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			l.Check(context.Background(), time.Unix(0, 0), entry, hotparam.CheckOptions{}, nil)
		}
		if got := fallbacks(t, m, policy); got != 3 {
			t.Errorf("fallbacks counted under %q: got %v, want 3", policy, got)
		}
	}
}

// fallbacks reads extauthz_redis_fallbacks_total{policy=policy}.
func fallbacks(t *testing.T, m *metrics.Metrics, policy string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "extauthz_redis_fallbacks_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == policy {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
