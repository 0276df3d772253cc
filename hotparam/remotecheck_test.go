package hotparam

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// checkingRemote is a fake Remote that also checks ops (RemoteChecker) with its func.
type checkingRemote struct {
	fakeRemote
	check   func(RemoteOp) error
	checked []RemoteOp
}

var _ RemoteChecker = (*checkingRemote)(nil)

func (c *checkingRemote) CheckOp(op RemoteOp) error {
	c.checked = append(c.checked, op)
	return c.check(op)
}

var errTooBig = errors.New("count above the store's bound")

// atMost refuses ops whose count exceeds n.
func atMost(n int64) func(RemoteOp) error {
	return func(op RemoteOp) error {
		if op.Count > n {
			return errTooBig
		}
		return nil
	}
}

func TestRemoteCheckerAtNewAndReload(t *testing.T) {
	rules := []Rule{
		{Resource: "r", Param: "p", Count: 1000, Duration: time.Second}, // local: not checked
		{Resource: "r", Param: "p", Count: 10, Burst: 3, Duration: time.Minute, Cluster: true, Refund: true,
			Items: map[string]int64{"a": 40, "b": 7}},
		{Resource: "s", Param: "q", Grade: Concurrency, Count: 5, Lease: time.Second, Cluster: true, Shadow: true},
		{Resource: "t", Param: "q", Behavior: Throttle, Count: 20, Duration: time.Second, MaxQueueingTime: time.Second, Cluster: true},
	}
	c := &checkingRemote{fakeRemote: fakeRemote{eval: allowAll}, check: atMost(100)}
	l, err := New(rules, Options{Remote: c})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	want := []RemoteOp{
		{RuleID: l.idOf(1), Grade: QPS, Count: 40, Burst: 3, Duration: time.Minute, Lease: DefaultLease, Hits: 1, Refund: true},
		{RuleID: l.idOf(2), Grade: Concurrency, Count: 5, Lease: time.Second, Hits: 1, Shadow: true},
		{RuleID: l.idOf(3), Behavior: Throttle, Count: 20, Duration: time.Second, MaxWait: time.Second, Lease: DefaultLease, Hits: 1},
	}
	if len(c.checked) != len(want) {
		t.Fatalf("checked %d ops %+v, want %d (the cluster rules)", len(c.checked), c.checked, len(want))
	}
	for i := range want {
		if c.checked[i] != want[i] {
			t.Errorf("checked op %d = %+v, want %+v", i, c.checked[i], want[i])
		}
	}

	tests := []struct {
		name   string
		mutate func([]Rule)
		want   string // "" for no error
	}{
		{"an item above the bound", func(r []Rule) { r[1].Items["b"] = 101 },
			`hotparam: rule 1 (resource "r", param "p")`},
		{"a count above the bound", func(r []Rule) { r[3].Count = 1000 },
			`hotparam: rule 3 (resource "t", param "q")`},
		{"a local rule above the bound is not the store's business", func(r []Rule) { r[0].Count = 1 << 40 }, ""},
		{"a cluster rule made local", func(r []Rule) { r[3].Count, r[3].Cluster = 1000, false }, ""},
		{"all within", func([]Rule) {}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := make([]Rule, len(rules))
			copy(rs, rules)
			rs[1].Items = map[string]int64{"a": 40, "b": 7}
			tc.mutate(rs)
			for _, build := range []struct {
				name string
				f    func() (*Limiter, error)
			}{
				{"New", func() (*Limiter, error) { return New(rs, Options{Remote: c}) }},
				{"Reload", func() (*Limiter, error) { return l.Reload(rs, Options{Remote: c}) }},
			} {
				got, err := build.f()
				if tc.want == "" {
					if err != nil {
						t.Errorf("%s: %v, want no error", build.name, err)
					}
					continue
				}
				if got != nil || !errors.Is(err, errTooBig) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v, %v; want an error naming %s and wrapping the store's", build.name, got, err, tc.want)
				}
			}
		})
	}
	// A Remote that is not a RemoteChecker is not asked; no Remote, no checks.
	if _, err := New(append(rules[:1:1], Rule{Resource: "r", Param: "p", Count: 1 << 40, Duration: time.Second, Cluster: true}),
		Options{Remote: &fakeRemote{eval: allowAll}}); err != nil {
		t.Errorf("New with a plain Remote: %v", err)
	}
	n := len(c.checked)
	if _, err := New(rules, Options{}); err != nil || len(c.checked) != n {
		t.Errorf("New without a Remote: %v, %d checks, want none", err, len(c.checked)-n)
	}
}

func TestOnFallback(t *testing.T) {
	down := errors.New("store down")
	for _, fb := range []Fallback{FallbackLocal, FallbackAllow, FallbackDeny} {
		var got []error
		f := &fakeRemote{eval: func([]RemoteOp, []RemoteResult) error { return down }}
		l, err := New(clusterRules(), Options{Remote: f, Fallback: fb, OnFallback: func(err error) { got = append(got, err) }})
		if err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			name  string
			eval  func([]RemoteOp, []RemoteResult) error
			e     Entry
			calls int // OnFallback calls so far
		}{
			{"store down: one call for a check of several cluster ops", nil,
				Entry{Resource: "r", Params: []Param{{Name: "p", Values: []string{"v"}}, {Name: "q", Values: []string{"x", "y"}}}}, 1},
			{"store down again", nil, one("w", 1), 2},
			{"no cluster rule involved", nil, Entry{Resource: "other"}, 2},
			{"store back", allowAll, one("w", 1), 2},
			{"blocked by the Remote is no fallback", blockValue("w"), one("w", 1), 2},
			{"blocked locally: the Remote is not asked", nil, one("v", 6), 2},
		}
		for _, s := range steps {
			f.eval = s.eval
			if f.eval == nil {
				f.eval = func([]RemoteOp, []RemoteResult) error { return down }
			}
			check(l, t0, s.e)
			if len(got) != s.calls {
				t.Fatalf("fallback %d, %s: %d calls, want %d", fb, s.name, len(got), s.calls)
			}
		}
		for i, err := range got {
			if err != down {
				t.Errorf("fallback %d: call %d got %v, want the Remote's error", fb, i, err)
			}
		}
	}
}
