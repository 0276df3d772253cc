package closest

import "testing"

func TestName(t *testing.T) {
	known := []string{"from", "name", "resource", "controlBehavior", "count"}
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"frm", "from", true},                         // one deletion
		{"FROM", "from", true},                        // case alone
		{"Resourse", "resource", true},                // a substitution, any case
		{"controlbehaviour", "controlBehavior", true}, // an insertion, case ignored
		{"cont", "count", true},                       // first of the closest
		{"nmae", "name", true},                        // a swap is two edits
		{"grade", "", false},                          // nothing within two edits
		{"", "", false},
	} {
		got, ok := Name(c.name, known)
		if got != c.want || ok != c.ok {
			t.Errorf("Name(%q) = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	if got, ok := Name("x", nil); ok || got != "" {
		t.Errorf("no known names: %q, %v", got, ok)
	}
}
