package envoyapi

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/extauthz/extauthz/policy"
)

// TestQuota: what the x-ratelimit-* headers state of a status: remaining never above limit
// (burst), one rounding of reset (up), a unit only for exactly one second, minute, hour or day.
func TestQuota(t *testing.T) {
	const (
		sec     = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute  = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour    = rlsv3.RateLimitResponse_RateLimit_HOUR
		day     = rlsv3.RateLimitResponse_RateLimit_DAY
		unknown = rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	)
	tests := []struct {
		st        policy.Limit
		want      quota
		wantLimit string
	}{
		{policy.Limit{Limit: 5, Duration: time.Second, Remaining: 3, Reset: 400 * time.Millisecond},
			quota{5, 3, sec, 1, 1}, "5, 5;w=1"},
		// Burst: the bucket holds 6 of a limit of 5; the headers say 5.
		{policy.Limit{Limit: 5, Duration: time.Second, Remaining: 6, Reset: 0},
			quota{5, 5, sec, 1, 0}, "5, 5;w=1"},
		{policy.Limit{Limit: 3, Duration: time.Minute, Remaining: 2, Reset: 20 * time.Second},
			quota{3, 2, minute, 60, 20}, "3, 3;w=60"},
		{policy.Limit{Limit: 3, Duration: time.Hour, Remaining: 0, Reset: time.Hour + time.Nanosecond},
			quota{3, 0, hour, 3600, 3601}, "3, 3;w=3600"},
		{policy.Limit{Limit: 9, Duration: 24 * time.Hour, Remaining: 9},
			quota{9, 9, day, 86400, 0}, "9, 9;w=86400"},
		// Not a whole unit: no window, the count the remaining follows.
		{policy.Limit{Limit: 5, Duration: 2 * time.Second, Remaining: 4, Reset: 1500 * time.Millisecond},
			quota{5, 4, unknown, 0, 2}, "5"},
		{policy.Limit{Limit: 90, Duration: 90 * time.Second, Remaining: 89, Reset: time.Second},
			quota{90, 89, unknown, 0, 1}, "90"},
		{policy.Limit{Limit: 2, Duration: 2 * time.Minute, Remaining: 1},
			quota{2, 1, unknown, 0, 0}, "2"},
		// Concurrency: no duration.
		{policy.Limit{Limit: 3, Remaining: 1}, quota{3, 1, unknown, 0, 0}, "3"},
		{policy.Limit{Limit: 1 << 40, Duration: time.Second, Remaining: 1 << 40},
			quota{math.MaxUint32, math.MaxUint32, sec, 1, 0}, "4294967295, 4294967295;w=1"},
		{policy.Limit{Limit: 0, Duration: time.Second, Remaining: -1, Reset: -time.Second},
			quota{0, 0, sec, 1, 0}, "0, 0;w=1"},
	}
	for _, tt := range tests {
		q := quotaOf(&tt.st)
		if q != tt.want {
			t.Errorf("quotaOf(%+v) = %+v, want %+v", tt.st, q, tt.want)
		}
		if got := string(q.appendLimit(nil)); got != tt.wantLimit {
			t.Errorf("limit header of %+v = %q, want %q", tt.st, got, tt.wantLimit)
		}
		if q.remaining > q.limit {
			t.Errorf("quotaOf(%+v): remaining %d above limit %d", tt.st, q.remaining, q.limit)
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
