package decode

import "testing"

func TestFieldPath(t *testing.T) {
	tests := []struct {
		field string
		want  []step
	}{
		{"", nil},
		{"count", []step{{key: "count", index: -1}}},
		{"items[0].value", []step{{key: "items", index: -1}, {index: 0}, {key: "value", index: -1}}},
		{"a[1][2]", []step{{key: "a", index: -1}, {index: 1}, {index: 2}}},
		{"a[x].b", []step{{key: "a", index: -1}}},
	}
	for _, tt := range tests {
		got := fieldPath(tt.field)
		if len(got) != len(tt.want) {
			t.Errorf("fieldPath(%q) = %v, want %v", tt.field, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("fieldPath(%q) = %v, want %v", tt.field, got, tt.want)
				break
			}
		}
	}
}
