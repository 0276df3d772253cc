package observe

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/extauthz/extauthz/internal/audit"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// blockedCall runs one Check through o's interceptor, decided as a block with origin and
// value.
func blockedCall(t *testing.T, o *Observer, origin, value string) {
	t.Helper()
	info := &grpc.UnaryServerInfo{FullMethod: authv3.Authorization_Check_FullMethodName}
	handler := func(ctx context.Context, req any) (any, error) {
		d := audit.Decision{Result: "blocked", Reason: "qps", Resource: "GET:/r", Origin: origin, Param: "p", Value: value}
		resp := &authv3.CheckResponse{}
		o.report(ctx, req, resp, &d, nil)
		return resp, nil
	}
	if _, err := o.Unary(context.Background(), checkRequest(nil, ""), info, handler); err != nil {
		t.Fatal(err)
	}
}

// At most MaxPerSecond decision lines a second; the next second's first line is preceded by
// one line saying how many the second before left out, and OnSuppressed is told the same
// count. A flood's last second is reported by the flush, once.
func TestDecisionLogBudget(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 100e6, time.UTC)
	c := &clock{t: t0}
	var reported []uint64
	var mu sync.Mutex
	o := New(Options{Log: zap.New(core), MaxPerSecond: 3, Now: c.now, OnSuppressed: func(n uint64) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, n)
	}})
	for range 10 {
		blockedCall(t, o, "o", "v")
	}
	if got := logs.FilterMessage("decision").Len(); got != 3 {
		t.Errorf("%d decision lines in the first second, want 3", got)
	}
	if got := logs.FilterMessage(MsgSuppressed).Len(); got != 0 {
		t.Errorf("%d suppressed lines while the second lasts, want 0", got)
	}

	c.set(t0.Add(time.Second))
	blockedCall(t, o, "o", "v")
	sup := logs.FilterMessage(MsgSuppressed).All()
	if len(sup) != 1 || sup[0].ContextMap()["suppressed"] != uint64(7) || sup[0].Level != zapcore.WarnLevel ||
		sup[0].ContextMap()["max_per_second"] != int64(3) {
		t.Fatalf("suppressed lines %v, want one at warn saying 7 of at most 3", sup)
	}
	if got := sup[0].ContextMap()["second"]; !got.(time.Time).Equal(t0.Truncate(time.Second)) {
		t.Errorf("suppressed line for second %v, want %v", got, t0.Truncate(time.Second))
	}
	if got := logs.FilterMessage("decision").Len(); got != 4 {
		t.Errorf("%d decision lines after the second second's first call, want 4", got)
	}

	// Four more in the second second: two suppressed, reported by the flush once it is over.
	for range 4 {
		blockedCall(t, o, "o", "v")
	}
	o.flushSuppressed() // the second is not over: nothing
	c.set(t0.Add(2 * time.Second))
	o.flushSuppressed()
	o.flushSuppressed()
	sup = logs.FilterMessage(MsgSuppressed).All()
	if len(sup) != 2 || sup[1].ContextMap()["suppressed"] != uint64(2) {
		t.Errorf("suppressed lines %v, want a second one saying 2", sup)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 2 || reported[0] != 7 || reported[1] != 2 {
		t.Errorf("OnSuppressed told %v, want [7 2]", reported)
	}
}

// A flood's last suppressed lines are reported by the timer a suppression sets, with no later
// call: on the real clock, about a second later.
func TestDecisionLogBudgetTimer(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	o := New(Options{Log: zap.New(core), MaxPerSecond: 1})
	for range 3 {
		blockedCall(t, o, "o", "v")
	}
	deadline := time.Now().Add(5 * time.Second)
	for logs.FilterMessage(MsgSuppressed).Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no suppressed line within 5s of the calls")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Three calls may straddle a second: 2 suppressed in one, or 1 then 0 written then 1.
	var n uint64
	for _, e := range logs.FilterMessage(MsgSuppressed).All() {
		n += e.ContextMap()["suppressed"].(uint64)
	}
	if lines := uint64(logs.FilterMessage("decision").Len()); lines+n != 3 {
		t.Errorf("%d lines written and %d reported suppressed, want 3 in all", lines, n)
	}
}

// Long fields are cut to MaxFieldLen bytes at a character boundary and marked with their
// length, in the log line.
func TestDecisionLogCuts(t *testing.T) {
	long := strings.Repeat("a", 4096)
	euro := strings.Repeat("€", 100) // 300 bytes, 3 a character
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"short", "short"},
		{strings.Repeat("x", MaxFieldLen), strings.Repeat("x", MaxFieldLen)},
		{long, strings.Repeat("a", MaxFieldLen) + "…[truncated, 4096 bytes]"},
		{euro, strings.Repeat("€", 85) + "…[truncated, 300 bytes]"},
	}
	for _, tt := range tests {
		got := cut(tt.in)
		if got != tt.want {
			t.Errorf("cut(%d bytes) = %q, want %q", len(tt.in), got, tt.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("cut(%d bytes) is not valid UTF-8", len(tt.in))
		}
	}

	core, logs := observer.New(zapcore.InfoLevel)
	o := New(Options{Log: zap.New(core)})
	blockedCall(t, o, long, long)
	e := logs.FilterMessage("decision").All()
	if len(e) != 1 {
		t.Fatalf("%d decision lines, want 1", len(e))
	}
	for _, f := range []string{"origin", "value"} {
		if got := e[0].ContextMap()[f]; got != tests[3].want {
			t.Errorf("%s = %q, want it cut and marked", f, got)
		}
	}
}
