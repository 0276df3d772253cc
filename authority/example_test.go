package authority_test

import (
	"fmt"

	"github.com/extauthz/extauthz/authority"
)

func Example() {
	rules := []authority.Rule{
		{
			Resource: "GET:/hello",
			Strategy: authority.White,
			Origins:  []string{"serviceA", "serviceC", "10.1.0.0/16", "2001:db8::/32"},
		},
		{
			Resource:      "GET:/hello",
			Strategy:      authority.Black,
			Origins:       []string{"10.1.66.0/24"},
			MissingOrigin: authority.MissingAllow,
		},
	}
	list, err := authority.New(rules)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, origin := range []string{"serviceA", "service", "10.1.2.3", "::ffff:10.1.2.3", "10.1.66.7", "2001:db8::9", ""} {
		rule, ok := list.Check("GET:/hello", origin)
		fmt.Printf("%-16q ok=%-5v rule=%d\n", origin, ok, rule)
	}
	rule, ok := list.Check("GET:/other", "anyone")
	fmt.Println("no rules:", ok, rule)

	_, err = authority.New([]authority.Rule{{Resource: "r", Origins: []string{"serviceA", "10.1.0.0/33"}}})
	fmt.Println(err)
	// Output:
	// "serviceA"       ok=true  rule=-1
	// "service"        ok=false rule=0
	// "10.1.2.3"       ok=true  rule=-1
	// "::ffff:10.1.2.3" ok=true  rule=-1
	// "10.1.66.7"      ok=false rule=1
	// "2001:db8::9"    ok=true  rule=-1
	// ""               ok=false rule=0
	// no rules: true -1
	// authority rule 0: origins[1]: invalid IP/CIDR origin "10.1.0.0/33": prefix length 33 is out of range 0-32 for IPv4
}

func ExampleValidateOrigin() {
	for _, entry := range []string{"serviceA", "10.1.0.0/16", "300.1.2.3", "10.0.0.1/", "fe80::1%eth0"} {
		fmt.Printf("%q: %v\n", entry, authority.ValidateOrigin(entry))
	}
	// Output:
	// "serviceA": <nil>
	// "10.1.0.0/16": <nil>
	// "300.1.2.3": invalid IP/CIDR origin "300.1.2.3": "300.1.2.3" is not a valid IP address: IPv4 field has value >255
	// "10.0.0.1/": invalid IP/CIDR origin "10.0.0.1/": missing prefix length after "/"
	// "fe80::1%eth0": invalid IP/CIDR origin "fe80::1%eth0": an IPv6 zone is not allowed in a rule
}
