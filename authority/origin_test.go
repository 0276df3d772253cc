package authority

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func TestLooksLikeIP(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"10.1.2.3", true},
		{"10.1.0.0/16", true},
		{"10.1.0.0/33", true},
		{"300.1.2.3", true},
		{"10.0.0.1/", true},
		{"10.0.0.1/abc", true},
		{"10.1", true},
		{"10.0.0.1:8080", true},
		{"::", true},
		{"::1", true},
		{"2001:db8::/32", true},
		{"fe80::1%eth0", true},
		{"[::1]:80", true},
		{"::ffff:1.2.3.4", true},
		{"beef:cafe:dead", true},
		{"serviceA", false},
		{"service", false},
		{"12345", false},
		{"v1.2", false},
		{"a:b", false},
		{"cafe:beef", false},
		{"GET:/hello", false},
		{"spiffe://cluster.local/ns/default/sa/web", false},
		{"spiffe://cluster.local/ns/default/sa/10.1.2.3", false},
		{"/10.1.2.3", false},
		{"10.0.0.1:", false},
		{"10.0.0.1:http", false},
		{"", false},
		{"[", false},
	}
	for _, tt := range tests {
		if got := LooksLikeIP(tt.in); got != tt.want {
			t.Errorf("LooksLikeIP(%q) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

func TestValidateOrigin(t *testing.T) {
	tests := []struct {
		in         string
		wantReason string // "" when valid; netip's own wording after ": " is not pinned
	}{
		{"serviceA", ""},
		{"spiffe://cluster.local/ns/default/sa/web", ""},
		{"10.1.2.3", ""},
		{"10.1.0.0/16", ""},
		{"10.1.2.3/16", ""}, // host bits are cleared
		{"0.0.0.0/0", ""},
		{"1.2.3.4/32", ""},
		{"::/0", ""},
		{"2001:db8::1/128", ""},
		{"::ffff:10.0.0.0/104", ""},
		{"", "empty origin entry (a missing origin is handled by missing_origin)"},
		{"10.1.0.0/33", "prefix length 33 is out of range 0-32 for IPv4"},
		{"::/129", "prefix length 129 is out of range 0-128 for IPv6"},
		{"300.1.2.3", `"300.1.2.3" is not a valid IP address: `},
		{"10.0.0.1/", `missing prefix length after "/"`},
		{"10.0.0.1/abc", `prefix length "abc" is not a number`},
		{"10.0.0.1/-1", `prefix length "-1" is not a number`},
		{"10.0.0.1/1000", `prefix length "1000" is not a number`},
		{"10.0.0.0/08", `prefix length "08" has a leading zero`},
		{"10.1", `"10.1" is not a valid IP address: `},
		{"010.1.2.3", `"010.1.2.3" is not a valid IP address: `},
		{"10.0.0.1:8080", "a port is not allowed; write the bare address"},
		{"[::1]:80", "brackets and ports are not allowed; write the bare address"},
		{"fe80::1%eth0", "an IPv6 zone is not allowed in a rule"},
		{"beef:cafe:dead", `"beef:cafe:dead" is not a valid IP address: `},
		{"1:2:3:4:5:6:7:8:9", `"1:2:3:4:5:6:7:8:9" is not a valid IP address: `},
	}
	for _, tt := range tests {
		err := ValidateOrigin(tt.in)
		if tt.wantReason == "" {
			if err != nil {
				t.Errorf("ValidateOrigin(%q) = %v; want nil", tt.in, err)
			}
			continue
		}
		var oe *OriginError
		if !errors.As(err, &oe) {
			t.Errorf("ValidateOrigin(%q) = %v; want an *OriginError", tt.in, err)
			continue
		}
		gotReason := oe.Reason
		if strings.HasSuffix(tt.wantReason, ": ") && strings.HasPrefix(gotReason, tt.wantReason) &&
			len(gotReason) > len(tt.wantReason) && !strings.Contains(gotReason, "ParseAddr(") {
			gotReason = tt.wantReason // netip's reason follows, without its ParseAddr lead
		}
		if gotReason != tt.wantReason || oe.Origin != tt.in {
			t.Errorf("ValidateOrigin(%q) = {%q, %q}; want {%q, %q}", tt.in, oe.Origin, oe.Reason, tt.in, tt.wantReason)
		}
		if tt.in != "" && !strings.Contains(err.Error(), `"`+tt.in+`"`) {
			t.Errorf("ValidateOrigin(%q) message %q does not name the entry", tt.in, err)
		}
	}
}

func TestParseEntry(t *testing.T) {
	tests := []struct{ in, want string }{
		{"10.1.2.3", "10.1.2.3/32"},
		{"10.1.2.3/16", "10.1.0.0/16"},
		{"0.0.0.0/0", "0.0.0.0/0"},
		{"255.255.255.255/1", "128.0.0.0/1"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"2001:db8:ffff::/33", "2001:db8:8000::/33"},
		{"::ffff:10.1.2.3", "10.1.2.3/32"},
		{"::ffff:10.1.2.3/120", "10.1.2.0/24"},
		{"::ffff:0.0.0.0/96", "0.0.0.0/0"},
		{"::ffff:10.1.2.3/95", "::fffe:0:0/95"}, // shorter than the mapped block: stays IPv6
	}
	for _, tt := range tests {
		got, err := parseEntry(tt.in)
		if err != nil || got.String() != tt.want {
			t.Errorf("parseEntry(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestParseAddrMatchesNetip checks that the allocation-free origin parser accepts and rejects
// exactly what netip.ParseAddr does (for inputs without a zone), and yields the same address.
func TestParseAddrMatchesNetip(t *testing.T) {
	inputs := []string{
		"", ".", ":", "::", ":::", "1", "1.", ".1", "1.2.3", "1.2.3.4", "1.2.3.4.", "1.2.3.4.5",
		"0.0.0.0", "255.255.255.255", "256.0.0.0", "01.2.3.4", "0.1.2.3", "1..2.3", "1.2.3.04",
		"1.2.3.4:80", " 1.2.3.4", "1.2.3.4 ", "1.2.3.a",
		"::1", "1::", "1::2", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8",
		"1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7", "1::2::3", ":1", "1:", "1:::2", "12345::",
		"fFfF::", "g::", "::ffff:1.2.3.4", "::1.2.3.4", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:1.2.3.4",
		"1:2:3:4:5:6:7:1.2.3.4", "::ffff:1.2.3", "::ffff:01.2.3.4", "::1.2.3.4:5", "1.2.3.4::",
		"2001:db8::", "2001:0db8:0000:0000:0000:0000:0000:0001", "::0000:1", "::00000:1",
		"1:2:3:4:5:6::7", "1:2:3:4:5:6:7::", "::1:2:3:4:5:6:7", "1::1.2.3.4", "ff::ffff:1.2.3.4",
		"serviceA", "a:b", "[::1]", "1.2.3.4/8", "::ffff:256.1.1.1",
	}
	// Random strings over the characters addresses are made of, from a fixed seed.
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789abcdefABCDEF:.:.::"
	for range 200000 {
		b := make([]byte, 1+r.IntN(24))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		inputs = append(inputs, string(b))
	}
	// Random valid addresses in their canonical and expanded forms.
	for range 5000 {
		var a16 [16]byte
		for i := range a16 {
			if r.IntN(3) > 0 {
				a16[i] = byte(r.Uint32())
			}
		}
		a := netip.AddrFrom16(a16)
		inputs = append(inputs, a.String(), a.StringExpanded(), a.Unmap().String())
	}
	for _, in := range inputs {
		want, wantErr := netip.ParseAddr(in)
		got, ok := parseAddr(in)
		if ok != (wantErr == nil) || got != want {
			t.Errorf("parseAddr(%q) = %v, %v; netip.ParseAddr gives %v, %v", in, got, ok, want, wantErr)
		}
	}
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "::ffff:1.2.3.4", "2001:db8::1", "1::2::3", "serviceA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if strings.IndexByte(in, '%') >= 0 {
			return // zones are stripped before parseAddr
		}
		want, wantErr := netip.ParseAddr(in)
		got, ok := parseAddr(in)
		if ok != (wantErr == nil) || got != want {
			t.Errorf("parseAddr(%q) = %v, %v; netip.ParseAddr gives %v, %v", in, got, ok, want, wantErr)
		}
	})
}

func TestParseOrigin(t *testing.T) {
	tests := []struct{ in, want string }{
		{"10.1.2.3", "10.1.2.3"},
		{"::ffff:10.1.2.3", "10.1.2.3"},
		{"fe80::1%eth0", "fe80::1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"serviceA", "invalid IP"},
		{"", "invalid IP"},
		{"10.1.2.3:80", "invalid IP"},
	}
	for _, tt := range tests {
		if got := parseOrigin(tt.in).String(); got != tt.want {
			t.Errorf("parseOrigin(%q) = %s; want %s", tt.in, got, tt.want)
		}
	}
}
