package authority

import (
	"testing"
)

func TestParseStrategy(t *testing.T) {
	tests := []struct {
		in      string
		want    Strategy
		wantErr bool
	}{
		{"white", White, false},
		{"black", Black, false},
		{"White", 0, true},
		{"", 0, true},
		{"0", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseStrategy(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseStrategy(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("ParseStrategy(%q).String() = %q; want it back", tt.in, got.String())
		}
	}
	if got, want := Strategy(7).String(), "Strategy(7)"; got != want {
		t.Errorf("Strategy(7).String() = %q; want %q", got, want)
	}
}

func TestParseMissingOrigin(t *testing.T) {
	tests := []struct {
		in      string
		want    MissingOrigin
		wantStr string
		wantErr bool
	}{
		{"", MissingDefault, "default", false},
		{"default", MissingDefault, "default", false},
		{"deny", MissingDeny, "deny", false},
		{"allow", MissingAllow, "allow", false},
		{"Allow", 0, "", true},
		{"true", 0, "", true},
	}
	for _, tt := range tests {
		got, err := ParseMissingOrigin(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseMissingOrigin(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && got.String() != tt.wantStr {
			t.Errorf("ParseMissingOrigin(%q).String() = %q; want %q", tt.in, got.String(), tt.wantStr)
		}
	}
	if got, want := MissingOrigin(9).String(), "MissingOrigin(9)"; got != want {
		t.Errorf("MissingOrigin(9).String() = %q; want %q", got, want)
	}
}

func TestTextRoundTrip(t *testing.T) {
	for _, s := range []Strategy{White, Black} {
		text, err := s.MarshalText()
		if err != nil {
			t.Fatalf("%v.MarshalText: %v", s, err)
		}
		var got Strategy = 9
		if err := got.UnmarshalText(text); err != nil || got != s {
			t.Errorf("Strategy round trip of %v via %q = %v, %v", s, text, got, err)
		}
	}
	for _, m := range []MissingOrigin{MissingDefault, MissingDeny, MissingAllow} {
		text, err := m.MarshalText()
		if err != nil {
			t.Fatalf("%v.MarshalText: %v", m, err)
		}
		var got MissingOrigin = 9
		if err := got.UnmarshalText(text); err != nil || got != m {
			t.Errorf("MissingOrigin round trip of %v via %q = %v, %v", m, text, got, err)
		}
	}
	if _, err := Strategy(2).MarshalText(); err == nil {
		t.Error("Strategy(2).MarshalText succeeded; want an error")
	}
	if _, err := MissingOrigin(3).MarshalText(); err == nil {
		t.Error("MissingOrigin(3).MarshalText succeeded; want an error")
	}
	var s Strategy
	if err := s.UnmarshalText([]byte("grey")); err == nil || s != White {
		t.Errorf("UnmarshalText(grey) = %v, left %v; want an error and no change", err, s)
	}
	var m MissingOrigin = MissingAllow
	if err := m.UnmarshalText([]byte("maybe")); err == nil || m != MissingAllow {
		t.Errorf("UnmarshalText(maybe) = %v, left %v; want an error and no change", err, m)
	}
}
