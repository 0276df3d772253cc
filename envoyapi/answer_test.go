package envoyapi

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func TestCurrentLimit(t *testing.T) {
	const (
		sec    = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
		day    = rlsv3.RateLimitResponse_RateLimit_DAY
	)
	tests := []struct {
		count    int64
		d        time.Duration
		wantN    uint32
		wantUnit rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{5, time.Second, 5, sec},
		{5, time.Minute, 5, minute},
		{5, time.Hour, 5, hour},
		{5, 24 * time.Hour, 5, day},
		{0, time.Second, 0, sec},
		{90, 90 * time.Second, 1, sec},
		{5, 2 * time.Second, 150, minute},
		{1, 100 * time.Millisecond, 10, sec},
		{3, 700 * time.Millisecond, 4, sec}, // no unit gives a whole number: rounded down
		{7, 3 * time.Hour, 56, day},
		{5, 90 * time.Minute, 80, day},
		{1, 47 * time.Hour, 0, day}, // under one per day
		{3, 48 * time.Hour, 1, day}, // over a day: per DAY, rounded down
		{1_000_000, 2 * time.Second, 500_000, sec},
		{1_000_000, time.Second, 1_000_000, sec},
		{1 << 40, time.Second, math.MaxUint32, sec},
		{1 << 40, 2 * time.Second, math.MaxUint32, minute},
		{math.MaxInt64, time.Millisecond, math.MaxUint32, sec},
		{3, 0, 3, rlsv3.RateLimitResponse_RateLimit_UNKNOWN}, // concurrency
		{-1, time.Second, 0, sec},
	}
	for _, tt := range tests {
		n, u := currentLimit(tt.count, tt.d)
		if n != tt.wantN || u != tt.wantUnit {
			t.Errorf("currentLimit(%d, %v) = %d %v, want %d %v", tt.count, tt.d, n, u, tt.wantN, tt.wantUnit)
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	tests := []struct {
		d           time.Duration
		want        int64
		wantAtLeast int64 // retryAfter
	}{
		{0, 0, 1},
		{-time.Second, 0, 1},
		{time.Nanosecond, 1, 1},
		{time.Second, 1, 1},
		{time.Second + time.Nanosecond, 2, 2},
		{90 * time.Second, 90, 90},
		{math.MaxInt64, 9223372037, 9223372037},
	}
	for _, tt := range tests {
		if got := ceilSeconds(tt.d); got != tt.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
		if got := retryAfter(tt.d); got != tt.wantAtLeast {
			t.Errorf("retryAfter(%v) = %d, want %d", tt.d, got, tt.wantAtLeast)
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{`q"b\s`, `q"b\s`},
		{"ctl\x00\x1f\n\r\t", "ctl\x00\x1f\n\r\t"},
		{"<a&b>", "<a&b>"},
		{"héllo, 世界", "héllo, 世界"},
		{"bad\xff\xfeutf8", "bad\ufffd\ufffdutf8"},
	}
	for _, tt := range tests {
		b := appendJSONString(nil, tt.in)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("appendJSONString(%q) = %s: not JSON: %v", tt.in, b, err)
			continue
		}
		if got != tt.want {
			t.Errorf("appendJSONString(%q) decodes to %q, want %q", tt.in, got, tt.want)
		}
	}
}
