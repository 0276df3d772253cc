package match

import "testing"

func TestNumberKey(t *testing.T) {
	for _, tc := range []struct {
		class, value, want string
	}{
		{"int", "007", "7"}, {"int", "+7", "7"}, {"int", "-0", "0"}, {"int", "٧", "7"},
		{"int", "2147483647", "2147483647"}, {"int", "2147483648", "2147483648"}, // out of range: text
		{"int", "-2147483648", "-2147483648"}, {"int", " 7", " 7"}, {"int", "7.0", "7.0"}, {"int", "", ""},
		{"long", "09223372036854775807", "9223372036854775807"}, {"byte", "0128", "0128"}, {"byte", "-128", "-128"},
		{"double", "1.50", "1.5"}, {"double", "15e-1", "1.5"}, {"double", " 2d", "2"}, {"double", "abc", "abc"},
		{"float", "0.1", "0.1"}, {"java.lang.Integer", "08", "8"},
	} {
		n, ok := NewNumber(tc.class)
		if !ok {
			t.Fatalf("NewNumber(%q): not a number type", tc.class)
		}
		if got := n.Key(tc.value); got != tc.want {
			t.Errorf("%s Key(%q) = %q, want %q", tc.class, tc.value, got, tc.want)
		}
	}
	for _, c := range []string{"Integer", "String", "java.lang.Character", "boolean", "char", ""} {
		if _, ok := NewNumber(c); ok {
			t.Errorf("NewNumber(%q): a number type, want none (Sentinel reads it otherwise)", c)
		}
	}
}
