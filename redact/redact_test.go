package redact

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestSensitive(t *testing.T) {
	r, err := New([]string{"user", "X-Tenant"}, testKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		param string
		want  bool
	}{
		{"api_key", true},
		{"X-Api-Key", true},
		{"apiKey", true},
		{"access_key_id", true},
		{"token", true},
		{"upstream_token", true},
		{"Authorization", true},
		{"password", true},
		{"db_passwd", true},
		{"client_secret", true},
		{"session_id", true},
		{"cookie", true},
		{"jwt", true},
		{"user", true},     // configured
		{"USER", true},     // configured, other spelling
		{"x_tenant", true}, // configured as X-Tenant
		{"user_id", false}, // configured names match whole
		{"item_id", false},
		{"client_ip", false},
		{"authority", false}, // not "authorization"
		{"footprint", false},
		{"", false},
	} {
		if got := r.Sensitive(tc.param); got != tc.want {
			t.Errorf("Sensitive(%q) = %v, want %v", tc.param, got, tc.want)
		}
	}
}

func TestValueIsTheDocumentedHMAC(t *testing.T) {
	r, err := New(nil, testKey)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte("sk-live-42"))
	want := "hmac:" + hex.EncodeToString(m.Sum(nil))[:32]
	if got := r.Value("api_key", "sk-live-42"); got != want {
		t.Errorf("Value(api_key) = %q, want %q", got, want)
	}
	if got := r.Value("item_id", "sk-live-42"); got != "sk-live-42" {
		t.Errorf("Value(item_id) = %q, want the value as it is", got)
	}
	if got := r.Value("api_key", ""); got != "" {
		t.Errorf("Value(api_key, \"\") = %q, want \"\"", got)
	}
	if r.Value("api_key", "a") == r.Value("api_key", "b") {
		t.Error("two values share a hash")
	}
}

func TestKeys(t *testing.T) {
	a, _ := New(nil, testKey)
	b, _ := New(nil, testKey)
	if a.Hash("v") != b.Hash("v") {
		t.Error("two Redactors with one key hash a value differently")
	}
	c, err := New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := New(nil, nil)
	if c.Hash("v") == d.Hash("v") || c.Hash("v") == a.Hash("v") {
		t.Error("random keys give the same hash")
	}
	if h := c.Hash("v"); h != c.Hash("v") {
		t.Error("a random key's hash is not stable")
	}
	if _, err := New(nil, []byte("short")); err != ErrShortKey {
		t.Errorf("New with a 5-byte key: %v, want ErrShortKey", err)
	}
}

func TestCoreHashesSensitiveValues(t *testing.T) {
	r, _ := New(nil, testKey)
	core, logs := observer.New(zapcore.InfoLevel)
	log := r.Logger(zap.New(core)).With(zap.String("api", "check"))
	log.Info("blocked", zap.String("param", "api_key"), zap.String("value", "sk-live-42"))
	log.Info("blocked", zap.String("param", "item_id"), zap.String("value", "7"))
	log.Debug("blocked", zap.String("param", "api_key"), zap.String("value", "sk-live-42"))
	got := logs.AllUntimed()
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2", len(got))
	}
	if v := got[0].ContextMap()["value"]; v != r.Hash("sk-live-42") {
		t.Errorf("sensitive value logged as %v, want %s", v, r.Hash("sk-live-42"))
	}
	if a := got[0].ContextMap()["api"]; a != "check" {
		t.Errorf("With field lost: api = %v", a)
	}
	if v := got[1].ContextMap()["value"]; v != "7" {
		t.Errorf("plain value logged as %v, want 7", v)
	}
	for _, e := range got {
		for _, f := range e.Context {
			if strings.Contains(f.String, "sk-live") {
				t.Errorf("field %s carries the value in clear", f.Key)
			}
		}
	}
}

// Under a sampler, as Logger's doc says to compose them, the sampling still applies and every
// entry written is redacted.
func TestCoreUnderSampler(t *testing.T) {
	r, _ := New(nil, testKey)
	core, logs := observer.New(zapcore.InfoLevel)
	dropped := 0
	log := r.Logger(zap.New(core)).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Hour, 3, 0, zapcore.SamplerHook(func(_ zapcore.Entry, d zapcore.SamplingDecision) {
			if d&zapcore.LogDropped != 0 {
				dropped++
			}
		}))
	}))
	for range 10 {
		log.Info("blocked", zap.String("param", "api_key"), zap.String("value", "sk-live-42"))
	}
	if logs.Len() != 3 || dropped != 7 {
		t.Errorf("%d entries written, %d dropped; want 3 and 7", logs.Len(), dropped)
	}
	for _, e := range logs.AllUntimed() {
		if v := e.ContextMap()["value"]; v != r.Hash("sk-live-42") {
			t.Errorf("value logged as %v", v)
		}
	}
}
