package rulestore

import (
	"reflect"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/authority"
)

// TestLiteralRoundTrip: an imported Sentinel authority rule is described in the native format
// (validate's form) with literal: true, and that native rule decides every origin as the
// imported one does: entries written like a range or an address are names, spaces are kept.
// Without literal the same native origins would match addresses.
func TestLiteralRoundTrip(t *testing.T) {
	imported, err := Parse("s.json", []byte(`{"authorityRules": [{"resource": "r", "limitApp": "10.0.0.0/8,appA, appB,10.9.9.9", "strategy": 0}]}`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	desc := DescribeAuthority(imported.Authority[0])
	if want := `{resource: "r", strategy: white, origins: ["10.0.0.0/8", "appA", " appB", "10.9.9.9"], literal: true}`; desc != want {
		t.Fatalf("described as %s\nwant %s", desc, want)
	}
	native, err := Parse("n.yaml", []byte("authority:\n  - "+desc+"\n"), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(native.Authority, imported.Authority) {
		t.Errorf("native rule %+v, imported %+v", native.Authority, imported.Authority)
	}
	addressed, err := Parse("n.yaml", []byte("authority:\n  - "+strings.Replace(desc, ", literal: true", "", 1)+"\n"), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decide := func(rules []authority.Rule) []bool {
		l, err := authority.New(rules)
		if err != nil {
			t.Fatal(err)
		}
		var out []bool
		for _, o := range []string{"10.0.0.0/8", "10.9.9.9", "10.1.2.3", "appA", " appB", "appB"} {
			_, ok := l.Check("r", o)
			out = append(out, ok)
		}
		return out
	}
	want := []bool{true, true, false, true, true, false}
	if got := decide(imported.Authority); !reflect.DeepEqual(got, want) {
		t.Errorf("imported rule admits %v, want %v", got, want)
	}
	if got := decide(native.Authority); !reflect.DeepEqual(got, want) {
		t.Errorf("literal native rule admits %v, want %v", got, want)
	}
	if got := decide(addressed.Authority); reflect.DeepEqual(got, want) {
		t.Errorf("the native rule without literal admits %v too: the test shows nothing", got)
	}
	// /rules shows it too.
	if !AuthorityOf(native.Authority[0]).Literal {
		t.Errorf("AuthorityOf = %+v, want Literal", AuthorityOf(native.Authority[0]))
	}
	// An empty entry is still refused.
	if _, err := Parse("n.yaml", []byte("authority:\n  - {resource: r, strategy: white, origins: [\"a\", \"\"], literal: true}\n"), ParseOptions{}); err == nil || !strings.Contains(err.Error(), "origins[1]: must not be empty") {
		t.Errorf("an empty literal entry: %v, want origins[1]: must not be empty", err)
	}
}
