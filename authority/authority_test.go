package authority

import (
	"errors"
	"testing"
)

// check is one Check call and its expected answer.
type check struct {
	resource, origin string
	wantRule         int
	wantOK           bool
}

func runChecks(t *testing.T, l *List, checks []check) {
	t.Helper()
	for _, c := range checks {
		gotRule, gotOK := l.Check(c.resource, c.origin)
		if gotRule != c.wantRule || gotOK != c.wantOK {
			t.Errorf("Check(%q, %q) = %d, %v; want %d, %v",
				c.resource, c.origin, gotRule, gotOK, c.wantRule, c.wantOK)
		}
	}
}

func mustNew(t *testing.T, rules []Rule) *List {
	t.Helper()
	l, err := New(rules)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func TestCheckExactNames(t *testing.T) {
	l := mustNew(t, []Rule{
		{Resource: "GET:/hello", Strategy: White, Origins: []string{"serviceA", "serviceC"}},
		{Resource: "GET:/admin", Strategy: Black, Origins: []string{"service", "Evil"}},
		{Resource: "spiffe", Strategy: White, Origins: []string{"spiffe://cluster.local/ns/default/sa/web"}},
	})
	runChecks(t, l, []check{
		{"GET:/hello", "serviceA", -1, true},
		{"GET:/hello", "serviceC", -1, true},
		{"GET:/hello", "serviceB", 0, false},
		{"GET:/hello", "service", 0, false},   // a prefix of a listed name
		{"GET:/hello", "serviceAB", 0, false}, // a listed name is a prefix of it
		{"GET:/hello", "xserviceA", 0, false}, // a listed name is a suffix of it
		{"GET:/hello", "servicea", 0, false},  // case-sensitive
		{"GET:/hello", "SERVICEA", 0, false},  // case-sensitive
		{"GET:/hello", "serviceA ", 0, false}, // no trimming
		{"GET:/hello", "serviceA,serviceC", 0, false},
		{"GET:/admin", "service", 1, false},
		{"GET:/admin", "serviceA", -1, true}, // "service" is a substring, not a match
		{"GET:/admin", "evil", -1, true},
		{"GET:/admin", "Evil", 1, false},
		{"spiffe", "spiffe://cluster.local/ns/default/sa/web", -1, true},
		{"spiffe", "spiffe://cluster.local/ns/default/sa/we", 2, false},
		{"GET:/other", "anyone", -1, true}, // no rules: allow
		{"get:/hello", "serviceB", -1, true},
	})
}

func TestCheckIPv4(t *testing.T) {
	l := mustNew(t, []Rule{
		{Resource: "r", Strategy: White, Origins: []string{
			"10.1.0.0/16", "192.168.1.7", "172.16.0.0/12", "203.0.113.9/32",
			"10.1.2.0/24",                  // nested inside 10.1.0.0/16
			"10.2.0.0/15", "10.3.128.0/17", // overlapping
		}},
	})
	runChecks(t, l, []check{
		{"r", "10.1.0.0", -1, true}, // first address of the range
		{"r", "10.1.255.255", -1, true},
		{"r", "10.0.255.255", 0, false}, // just below
		{"r", "10.2.0.0", -1, true},     // 10.1/16 and 10.2/15 are adjacent once merged
		{"r", "10.3.255.255", -1, true},
		{"r", "10.4.0.0", 0, false}, // just above
		{"r", "172.15.255.255", 0, false},
		{"r", "172.16.0.0", -1, true},
		{"r", "172.31.255.255", -1, true},
		{"r", "172.32.0.0", 0, false},
		{"r", "192.168.1.7", -1, true},
		{"r", "192.168.1.6", 0, false},
		{"r", "192.168.1.8", 0, false},
		{"r", "203.0.113.9", -1, true},
		{"r", "203.0.113.10", 0, false},
		{"r", "::ffff:10.1.2.3", -1, true}, // IPv4-mapped IPv6 origin
		{"r", "::ffff:192.168.1.8", 0, false},
		{"r", "::ffff:a01:203", -1, true}, // the same in hex
		{"r", "010.1.2.3", 0, false},      // not an IP (leading zero), not a listed name
		{"r", "10.1.2.3:8080", 0, false},  // an origin with a port is not an IP
		{"r", "10.1.0.0/16", 0, false},    // an origin is never a range
		{"r", "::a01:203", 0, false},      // IPv4-compatible, not IPv4-mapped: IPv6
	})
}

func TestCheckIPv6(t *testing.T) {
	l := mustNew(t, []Rule{
		{Resource: "r", Strategy: Black, Origins: []string{
			"2001:db8::/32", "2001:db8:1::/48", "fe80::1", "::1/128",
			"2001:db9:ffff:ffff:ffff:ffff:ffff:ffff",
			"::ffff:10.9.0.0/112", // IPv4-mapped range: 10.9.0.0/16
		}},
	})
	runChecks(t, l, []check{
		{"r", "2001:db8::", 0, false},
		{"r", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", 0, false},
		{"r", "2001:DB8:1::42", 0, false}, // upper-case hex
		{"r", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", -1, true},
		{"r", "2001:db9::", -1, true},
		{"r", "2001:db9:ffff:ffff:ffff:ffff:ffff:fffe", -1, true},
		{"r", "2001:db9:ffff:ffff:ffff:ffff:ffff:ffff", 0, false},
		{"r", "fe80::1", 0, false},
		{"r", "fe80::1%eth0", 0, false}, // the zone is ignored
		{"r", "fe80::2", -1, true},
		{"r", "::1", 0, false},
		{"r", "::2", -1, true},
		{"r", "::", -1, true},
		{"r", "10.9.200.1", 0, false},
		{"r", "::ffff:10.9.200.1", 0, false},
		{"r", "10.10.0.0", -1, true},
		{"r", "serviceA", -1, true},
	})
}

func TestCheckWholeSpace(t *testing.T) {
	l := mustNew(t, []Rule{
		{Resource: "v4", Strategy: Black, Origins: []string{"0.0.0.0/0"}},
		{Resource: "v6", Strategy: Black, Origins: []string{"::/0"}},
		{Resource: "all", Strategy: Black, Origins: []string{"::/0", "0.0.0.0/0", "::ffff:0.0.0.0/96"}},
		{Resource: "max", Strategy: White, Origins: []string{
			"255.255.255.255/32", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128",
			"255.255.255.0/24", "ffff:ffff:ffff:ffff::/64",
		}},
	})
	runChecks(t, l, []check{
		{"v4", "0.0.0.0", 0, false},
		{"v4", "255.255.255.255", 0, false},
		{"v4", "::ffff:1.2.3.4", 0, false},
		{"v4", "::1", -1, true}, // families are separate
		{"v4", "name", -1, true},
		{"v6", "::", 1, false},
		{"v6", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1, false},
		{"v6", "1.2.3.4", -1, true},
		{"v6", "::ffff:1.2.3.4", -1, true}, // an IPv4-mapped origin is IPv4
		{"all", "1.2.3.4", 2, false},
		{"all", "2001:db8::1", 2, false},
		{"all", "name", -1, true},
		{"max", "255.255.255.255", -1, true},
		{"max", "255.255.255.0", -1, true},
		{"max", "255.255.254.255", 3, false},
		{"max", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", -1, true},
		{"max", "ffff:ffff:ffff:ffff::", -1, true},
		{"max", "ffff:ffff:ffff:fffe:ffff:ffff:ffff:ffff", 3, false},
	})
}

func TestCheckNamesAndIPsTogether(t *testing.T) {
	l := mustNew(t, []Rule{
		{Resource: "r", Strategy: White, Origins: []string{"serviceA", "10.0.0.0/8", "gw"}},
	})
	runChecks(t, l, []check{
		{"r", "serviceA", -1, true},
		{"r", "gw", -1, true},
		{"r", "10.20.30.40", -1, true},
		{"r", "11.0.0.0", 0, false},
		{"r", "serviceB", 0, false},
		{"r", "10.0.0.0/8", 0, false},
	})
}

func TestCheckAllRulesMustPass(t *testing.T) {
	l := mustNew(t, []Rule{
		{Resource: "other", Strategy: White, Origins: []string{"nobody"}},
		{Resource: "r", Strategy: White, Origins: []string{"a", "b", "c", "10.0.0.0/8"}},
		{Resource: "r", Strategy: Black, Origins: []string{"b", "10.1.0.0/16"}},
		{Resource: "r", Strategy: White, Origins: []string{"a", "b", "10.1.2.3", "10.2.0.0/16"}},
	})
	runChecks(t, l, []check{
		{"r", "a", -1, true},
		{"r", "b", 2, false}, // passes rule 1, blocked by the black list
		{"r", "c", 3, false}, // passes rules 1 and 2, not in rule 3
		{"r", "d", 1, false}, // the first rule that blocks is reported
		{"r", "10.2.3.4", -1, true},
		{"r", "10.1.2.3", 2, false},
		{"r", "10.3.0.1", 3, false},
		{"r", "11.0.0.1", 1, false},
		{"other", "a", 0, false},
	})
}

func TestCheckMissingOrigin(t *testing.T) {
	tests := []struct {
		strategy Strategy
		missing  MissingOrigin
		wantOK   bool
	}{
		{White, MissingDefault, false},
		{White, MissingDeny, false},
		{White, MissingAllow, true},
		{Black, MissingDefault, true},
		{Black, MissingDeny, false},
		{Black, MissingAllow, true},
	}
	for _, tt := range tests {
		l := mustNew(t, []Rule{{Resource: "r", Strategy: tt.strategy, Origins: []string{"a", "10.0.0.0/8"}, MissingOrigin: tt.missing}})
		wantRule := -1
		if !tt.wantOK {
			wantRule = 0
		}
		gotRule, gotOK := l.Check("r", "")
		if gotRule != wantRule || gotOK != tt.wantOK {
			t.Errorf("%v list, missing %v: Check(r, \"\") = %d, %v; want %d, %v",
				tt.strategy, tt.missing, gotRule, gotOK, wantRule, tt.wantOK)
		}
	}

	// Several rules: each applies its own policy, the first that denies is reported.
	l := mustNew(t, []Rule{
		{Resource: "r", Strategy: Black, Origins: []string{"x"}},
		{Resource: "r", Strategy: White, Origins: []string{"a"}, MissingOrigin: MissingAllow},
		{Resource: "r", Strategy: White, Origins: []string{"a"}},
		{Resource: "s", Strategy: Black, Origins: []string{"x"}, MissingOrigin: MissingDeny},
	})
	runChecks(t, l, []check{
		{"r", "", 2, false},
		{"s", "", 3, false},
		{"none", "", -1, true},
	})
}

func TestCheckZeroAndNil(t *testing.T) {
	var nilList *List
	var zero List
	empty := mustNew(t, nil)
	for name, l := range map[string]*List{"nil": nilList, "zero": &zero, "empty": empty} {
		runChecks(t, l, []check{
			{"r", "a", -1, true},
			{"r", "", -1, true},
			{"", "", -1, true},
		})
		if got := l.Rules(); len(got) != 0 {
			t.Errorf("%s: Rules() = %v; want none", name, got)
		}
	}
}

func TestCheckEmptyLists(t *testing.T) {
	l := mustNew(t, []Rule{
		{Resource: "w", Strategy: White},
		{Resource: "b", Strategy: Black, Origins: []string{}},
	})
	runChecks(t, l, []check{
		{"w", "a", 0, false}, // an empty white list lets nobody through
		{"w", "1.2.3.4", 0, false},
		{"b", "a", -1, true}, // an empty black list keeps nobody out
		{"b", "1.2.3.4", -1, true},
	})
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name      string
		rules     []Rule
		wantRule  int
		wantField string
		wantEntry int
		wantMsg   string
	}{
		{"prefix too long v4", []Rule{
			{Resource: "a", Origins: []string{"ok"}},
			{Resource: "b", Origins: []string{"serviceA", "10.1.0.0/33"}},
		}, 1, "origins", 1, `authority rule 1: origins[1]: invalid IP/CIDR origin "10.1.0.0/33": prefix length 33 is out of range 0-32 for IPv4`},
		{"octet too big", []Rule{{Resource: "a", Origins: []string{"300.1.2.3"}}},
			0, "origins", 0, `authority rule 0: origins[0]: invalid IP/CIDR origin "300.1.2.3": "300.1.2.3" is not a valid IP address: IPv4 field has value >255`},
		{"missing prefix length", []Rule{{Resource: "a", Origins: []string{"x", "y", "10.0.0.1/"}}},
			0, "origins", 2, `authority rule 0: origins[2]: invalid IP/CIDR origin "10.0.0.1/": missing prefix length after "/"`},
		{"prefix too long v6", []Rule{{Resource: "a", Origins: []string{"2001:db8::/129"}}},
			0, "origins", 0, `authority rule 0: origins[0]: invalid IP/CIDR origin "2001:db8::/129": prefix length 129 is out of range 0-128 for IPv6`},
		{"empty entry", []Rule{{Resource: "a", Origins: []string{"a", ""}}},
			0, "origins", 1, `authority rule 0: origins[1]: empty origin entry (a missing origin is handled by missing_origin)`},
		{"empty resource", []Rule{{Origins: []string{"a"}}},
			0, "resource", -1, `authority rule 0: resource: empty resource`},
		{"bad strategy", []Rule{{Resource: "a"}, {Resource: "a", Strategy: 2}},
			1, "strategy", -1, `authority rule 1: strategy: unknown strategy 2: want White or Black`},
		{"bad missing origin", []Rule{{Resource: "a", MissingOrigin: 3}},
			0, "missing_origin", -1, `authority rule 0: missing_origin: unknown missing origin 3`},
	}
	for _, tt := range tests {
		l, err := New(tt.rules)
		if l != nil {
			t.Errorf("%s: New returned a list with an error", tt.name)
		}
		var re *RuleError
		if !errors.As(err, &re) {
			t.Errorf("%s: New error = %v; want a *RuleError", tt.name, err)
			continue
		}
		if re.Rule != tt.wantRule || re.Field != tt.wantField || re.Entry != tt.wantEntry {
			t.Errorf("%s: RuleError{Rule %d, Field %q, Entry %d}; want {%d, %q, %d}",
				tt.name, re.Rule, re.Field, re.Entry, tt.wantRule, tt.wantField, tt.wantEntry)
		}
		if got := err.Error(); got != tt.wantMsg {
			t.Errorf("%s: error\n got %s\nwant %s", tt.name, got, tt.wantMsg)
		}
		if tt.wantField == "origins" {
			var oe *OriginError
			if !errors.As(err, &oe) {
				t.Errorf("%s: error does not wrap an *OriginError", tt.name)
			}
		}
	}
}

func TestNewCopiesRules(t *testing.T) {
	in := []Rule{{Resource: "r", Strategy: White, Origins: []string{"a"}}}
	l := mustNew(t, in)
	in[0].Origins[0] = "b"
	in[0].Resource = "s"
	got := l.Rules()
	if len(got) != 1 || got[0].Resource != "r" || len(got[0].Origins) != 1 || got[0].Origins[0] != "a" {
		t.Errorf("Rules() = %+v; want the rules as given to New", got)
	}
	runChecks(t, l, []check{{"r", "a", -1, true}, {"r", "b", 0, false}})
}

func TestCheckConcurrent(t *testing.T) {
	l := mustNew(t, []Rule{
		{Resource: "r", Strategy: White, Origins: []string{"a", "10.0.0.0/8", "2001:db8::/32"}},
	})
	checks := []check{
		{"r", "a", -1, true},
		{"r", "b", 0, false},
		{"r", "10.9.9.9", -1, true},
		{"r", "2001:db9::", 0, false},
	}
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 1000 {
				for _, c := range checks {
					if gotRule, gotOK := l.Check(c.resource, c.origin); gotRule != c.wantRule || gotOK != c.wantOK {
						t.Errorf("Check(%q, %q) = %d, %v; want %d, %v", c.resource, c.origin, gotRule, gotOK, c.wantRule, c.wantOK)
						return
					}
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}

// TestShadowRules: Check leaves shadow rules out; CheckShadow runs them alone.
func TestShadowRules(t *testing.T) {
	l, err := New([]Rule{
		{Resource: "r", Strategy: White, Origins: []string{"a", "b"}},
		{Resource: "r", Strategy: Black, Origins: []string{"b", "10.0.0.0/8"}, Shadow: true},
		{Resource: "s", Strategy: White, Origins: []string{"a"}, Shadow: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		resource, origin string
		rule             int
		ok               bool
		shadowRule       int
		shadowBlocked    bool
	}{
		{"r", "a", -1, true, -1, false},
		{"r", "b", -1, true, 1, true},
		{"r", "c", 0, false, -1, false},
		{"r", "10.1.2.3", 0, false, 1, true},
		{"s", "z", -1, true, 2, true},
		{"s", "", -1, true, 2, true}, // a white list denies a missing origin
		{"s", "a", -1, true, -1, false},
		{"t", "z", -1, true, -1, false},
	}
	for _, tt := range tests {
		rule, ok := l.Check(tt.resource, tt.origin)
		sr, sb := l.CheckShadow(tt.resource, tt.origin)
		if rule != tt.rule || ok != tt.ok || sr != tt.shadowRule || sb != tt.shadowBlocked {
			t.Errorf("%s from %q: Check %d %v, CheckShadow %d %v; want %d %v, %d %v", tt.resource, tt.origin,
				rule, ok, sr, sb, tt.rule, tt.ok, tt.shadowRule, tt.shadowBlocked)
		}
	}
	for r, want := range map[string]bool{"r": true, "s": true, "t": false} {
		if got := l.Names(r); got != want {
			t.Errorf("Names(%q) = %v, want %v", r, got, want)
		}
	}
	var nilList *List
	if r, b := nilList.CheckShadow("r", "a"); r != -1 || b || nilList.Names("r") {
		t.Errorf("nil list: CheckShadow %d %v, Names %v; want nothing", r, b, nilList.Names("r"))
	}
}

// TestLiteral: a Literal rule matches its entries as exact strings, IP-shaped ones included, and
// accepts entries a native rule would refuse for their shape.
func TestLiteral(t *testing.T) {
	l, err := New([]Rule{
		{Resource: "w", Strategy: White, Origins: []string{"10.0.0.0/8", " appB", "10.1.1.1"}, Literal: true},
		{Resource: "b", Strategy: Black, Origins: []string{"10.0.0.0/8", "300.1.1.1"}, Literal: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		resource, origin string
		want             bool
	}{
		{"w", "10.9.9.9", false},
		{"w", "10.0.0.0/8", true},
		{"w", "appB", false},
		{"w", " appB", true},
		{"w", "10.1.1.1", true},
		{"w", "::ffff:10.1.1.1", false},
		{"b", "10.9.9.9", true},
		{"b", "10.0.0.0/8", false},
		{"b", "300.1.1.1", false},
	} {
		if _, got := l.Check(tc.resource, tc.origin); got != tc.want {
			t.Errorf("Check(%q, %q) = %v, want %v", tc.resource, tc.origin, got, tc.want)
		}
	}
	if _, err := New([]Rule{{Resource: "w", Origins: []string{""}, Literal: true}}); err == nil {
		t.Error("an empty entry of a literal rule: no error")
	}
}
