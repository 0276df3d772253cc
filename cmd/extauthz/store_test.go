package main

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/redisstore"
)

// Every store setting can come from the environment.
func TestStoreSettingsFromEnv(t *testing.T) {
	cfg, err := load(t, nil, map[string]string{
		"EXTAUTHZ_STORE_REDIS_ADDRS":            "a:1,b:2,c:3",
		"EXTAUTHZ_STORE_REDIS_MODE":             "cluster",
		"EXTAUTHZ_STORE_REDIS_USERNAME":         "svc",
		"EXTAUTHZ_STORE_REDIS_PASSWORD":         "secret",
		"EXTAUTHZ_STORE_REDIS_TLS":              "true",
		"EXTAUTHZ_STORE_REDIS_CA_FILE":          "/etc/ca.pem",
		"EXTAUTHZ_STORE_REDIS_TIMEOUT":          "20ms",
		"EXTAUTHZ_STORE_REDIS_FALLBACK":         "deny",
		"EXTAUTHZ_STORE_REDIS_REPLICAS":         "4",
		"EXTAUTHZ_STORE_REDIS_PREFIX":           "edge",
		"EXTAUTHZ_STORE_REDIS_BREAKER_FAILURES": "7",
		"EXTAUTHZ_STORE_REDIS_BREAKER_COOLDOWN": "250ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := RedisConfig{Addrs: []string{"a:1", "b:2", "c:3"}, Mode: "cluster", Username: "svc", Password: "secret",
		TLS: true, CAFile: "/etc/ca.pem", Timeout: 20 * time.Millisecond, Fallback: "deny", Replicas: 4,
		Prefix: "edge", BreakerFailures: 7, BreakerCooldown: 250 * time.Millisecond}
	if !reflect.DeepEqual(cfg.Store.Redis, want) {
		t.Errorf("store from env\n got %+v\nwant %+v", cfg.Store.Redis, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestCAFileRequiresTLS(t *testing.T) {
	cfg, err := load(t, nil, map[string]string{"EXTAUTHZ_STORE_REDIS_ADDRS": "a:1", "EXTAUTHZ_STORE_REDIS_CA_FILE": "/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "store.redis.ca_file") {
		t.Errorf("ca_file without tls: got %v, want an error naming store.redis.ca_file", err)
	}
}

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
		opts := limiterOptions(RedisConfig{Fallback: policy}, rem, m)
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
