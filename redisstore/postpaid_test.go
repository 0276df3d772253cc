package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// Postpaid budgets through both engines: admissions (probes), charges of what responses used
// (into debt, never refused), and the refill that pays a debt back. Every decision and status
// must be the same.

func postpaidRules() []hotparam.Rule {
	return []hotparam.Rule{
		// 10 tokens a 10s: one a second
		{Resource: "llm", Param: "user", Count: 10, Duration: 10 * time.Second, Postpaid: true, Cluster: true},
		// a postpaid budget with a burst beside a prepaid rule of the same resource
		{Resource: "mixed", Param: "user", Count: 4, Burst: 2, Duration: 4 * time.Second, Postpaid: true, Cluster: true},
		{Resource: "mixed", Param: "key", Count: 1, Duration: time.Hour, Cluster: true},
	}
}

// postpaidCall is one Check at t0+at: an admission (hits 0: a probe) or a charge of hits.
type postpaidCall struct {
	at       time.Duration
	resource string
	params   map[string][]string
	hits     int64
}

var postpaidCalls = []postpaidCall{
	{0, "llm", p("user", "a"), 0},
	{0, "llm", p("user", "a"), 6},
	{0, "llm", p("user", "a"), 0},
	{0, "llm", p("user", "a"), 7}, // 3 of debt
	{0, "llm", p("user", "a"), 0}, // refused: 4 seconds to a token
	{2 * time.Second, "llm", p("user", "a"), 0},
	{3 * time.Second, "llm", p("user", "a"), 0}, // debt paid, no token yet
	{3 * time.Second, "llm", p("user", "a"), 2}, // charged anyway: 2 of debt
	{5500 * ms, "llm", p("user", "a"), 0},
	{6 * time.Second, "llm", p("user", "a"), 0},
	{6 * time.Second, "llm", p("user", "a"), 1_000_000}, // a huge charge: one bucket of debt
	{6 * time.Second, "llm", p("user", "a"), 0},
	{16 * time.Second, "llm", p("user", "a"), 0}, // debt paid, bucket empty
	{17 * time.Second, "llm", p("user", "a"), 0},
	{26 * time.Second, "llm", p("user", "a"), 0}, // full again
	{26 * time.Second, "llm", p("user", "b"), 11},
	{27 * time.Second, "llm", p("user", "b"), 0},
	// mixed: a charge in a call the prepaid rule refuses is kept
	{0, "mixed", p("user", "m", "key", "k"), 0},
	{0, "mixed", p("user", "m", "key", "k"), 5}, // prepaid rule takes its token, budget 1 left
	{0, "mixed", p("user", "m", "key", "k"), 5}, // refused by the prepaid rule; the charge stays
	{0, "mixed", p("user", "m", "key", "j"), 0}, // in debt: refused
	{5 * time.Second, "mixed", p("user", "m", "key", "j"), 0},
	{6 * time.Second, "mixed", p("user", "m", "key", "j"), 0},
}

func (c postpaidCall) entries() []hotparam.Entry {
	e := hotparam.Entry{Resource: c.resource, Hits: c.hits, Probe: c.hits == 0}
	for _, name := range []string{"user", "key"} {
		if v, ok := c.params[name]; ok {
			e.Params = append(e.Params, hotparam.Param{Name: name, Values: v})
		}
	}
	return []hotparam.Entry{e}
}

func TestPostpaidParityWithLocal(t *testing.T) {
	s, _, clk := newTestStore(t)
	local, err := hotparam.New(postpaidRules(), hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	remote, err := hotparam.New(postpaidRules(), hotparam.Options{Remote: s, Fallback: hotparam.FallbackDeny,
		OnFallback: func(err error) { t.Errorf("fallback: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admitted := map[bool]int{}
	for i, c := range postpaidCalls {
		now := t0.Add(c.at)
		clk.now = now
		wantSt, gotSt := make([]hotparam.Status, 1), make([]hotparam.Status, 1)
		want := local.Check(ctx, now, c.entries(), hotparam.CheckOptions{}, wantSt)
		got := remote.Check(ctx, now, c.entries(), hotparam.CheckOptions{}, gotSt)
		if got != want {
			t.Errorf("call %d %+v: Redis decision %+v, local %+v", i, c, got, want)
		}
		if gotSt[0] != wantSt[0] {
			t.Errorf("call %d %+v: Redis status %+v, local %+v", i, c, gotSt[0], wantSt[0])
		}
		if c.hits == 0 {
			admitted[want.Allowed]++
		} else if c.resource == "llm" && !want.Allowed {
			t.Errorf("call %d %+v: a charge refused", i, c)
		}
	}
	if admitted[true] == 0 || admitted[false] == 0 {
		t.Errorf("admissions allowed/refused %d/%d: the table does not exercise both", admitted[true], admitted[false])
	}
}

// A postpaid rule whose numbers would not stay exact with a bucket of debt is refused at load.
func TestPostpaidCheckOp(t *testing.T) {
	// (3+78000) * 24h in microseconds / 3 is about 2^51: exact, but not four times over
	op := hotparam.RemoteOp{RuleID: "r", Count: 3, Burst: 78000, Duration: 24 * time.Hour, Postpaid: true}
	if err := CheckOp(op); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("CheckOp(postpaid) = %v, want ErrOutOfRange", err)
	}
	op.Postpaid = false
	if err := CheckOp(op); err != nil {
		t.Errorf("CheckOp(prepaid) = %v, want nil", err)
	}
}
