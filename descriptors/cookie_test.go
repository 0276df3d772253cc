package descriptors

import (
	"reflect"
	"testing"
)

// TestAppendCookie: pairs split on ";" and on "," (Envoy's join of repeated cookie headers),
// quotes removed, other names skipped.
func TestAppendCookie(t *testing.T) {
	tests := []struct {
		h    string
		want []string
	}{
		{"sid=1", []string{"1"}},
		{"a=1; sid=2", []string{"2"}},
		{"a=1,sid=2; b=3", []string{"2"}},
		{"sid=1,sid=\"2\";sid=3", []string{"1", "2", "3"}},
		{"sidx=1, xsid=2", nil},
		{"", nil},
		{";,;", nil},
	}
	for _, tt := range tests {
		if got := appendCookie(nil, tt.h, "sid", ""); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("appendCookie(%q) = %q, want %q", tt.h, got, tt.want)
		}
	}
}
