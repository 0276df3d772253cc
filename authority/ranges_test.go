package authority

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

func mustPrefixes(t testing.TB, entries ...string) []netip.Prefix {
	t.Helper()
	ps := make([]netip.Prefix, len(entries))
	for i, e := range entries {
		p, err := parseEntry(e)
		if err != nil {
			t.Fatalf("parseEntry(%q): %v", e, err)
		}
		ps[i] = p
	}
	return ps
}

func TestIPSetMerge(t *testing.T) {
	tests := []struct {
		name     string
		entries  []string
		wantSize int
	}{
		{"none", nil, 0},
		{"one", []string{"10.0.0.0/8"}, 1},
		{"nested", []string{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.3"}, 1},
		{"nested, small first", []string{"10.1.2.3", "10.1.0.0/16", "10.0.0.0/8"}, 1},
		{"adjacent", []string{"10.0.0.0/9", "10.128.0.0/9"}, 1},
		{"adjacent addresses", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, 1},
		{"gap of one", []string{"10.0.0.1", "10.0.0.3"}, 2},
		{"duplicates", []string{"1.2.3.4", "1.2.3.4", "::1", "::1"}, 2},
		{"everything v4", []string{"0.0.0.0/0", "1.2.3.4", "255.255.255.255"}, 1},
		{"top of v4", []string{"255.255.255.255", "255.255.255.254"}, 1},
		{"everything v6", []string{"::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::"}, 1},
		{"v6 adjacent across the 64-bit halves", []string{"::ffff:ffff:ffff:ffff", "0:0:0:1::"}, 1},
		{"families apart", []string{"0.0.0.0/0", "::/0"}, 2},
	}
	for _, tt := range tests {
		s := newIPSet(mustPrefixes(t, tt.entries...))
		if got := s.size(); got != tt.wantSize {
			t.Errorf("%s: %d merged ranges; want %d", tt.name, got, tt.wantSize)
		}
	}
}

// randomPrefix returns a random masked prefix: IPv4 or IPv6, lengths spread over the whole
// range but weighted towards long ones, addresses drawn from a small pool of high bits so that
// prefixes nest and overlap.
func randomPrefix(r *rand.Rand) netip.Prefix {
	if r.IntN(2) == 0 {
		var a [4]byte
		a[0] = byte(10 + r.IntN(4))
		for i := 1; i < 4; i++ {
			a[i] = byte(r.Uint32())
		}
		bits := 8 + r.IntN(25)
		if r.IntN(50) == 0 {
			bits = r.IntN(8)
		}
		return netip.PrefixFrom(netip.AddrFrom4(a), bits).Masked()
	}
	var a [16]byte
	a[0], a[1], a[2] = 0x20, 0x01, byte(r.IntN(4))
	for i := 3; i < 16; i++ {
		a[i] = byte(r.Uint32())
	}
	bits := 24 + r.IntN(105)
	if r.IntN(50) == 0 {
		bits = r.IntN(24)
	}
	return netip.PrefixFrom(netip.AddrFrom16(a), bits).Masked()
}

// lastAddr returns the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestIPSetMatchesLinearScan compares the set with the plain definition: an address is in the
// set when some prefix contains it. Probes are every prefix's first and last address and their
// neighbours, and random addresses.
func TestIPSetMatchesLinearScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{1, 2, 10, 300} {
		prefixes := make([]netip.Prefix, n)
		for i := range prefixes {
			prefixes[i] = randomPrefix(r)
		}
		s := newIPSet(append([]netip.Prefix(nil), prefixes...))
		var probes []netip.Addr
		for _, p := range prefixes {
			first, last := p.Addr(), lastAddr(p)
			probes = append(probes, first, first.Prev(), last, last.Next())
		}
		for range 2000 {
			probes = append(probes, randomPrefix(r).Addr(), lastAddr(randomPrefix(r)))
		}
		for _, a := range probes {
			if !a.IsValid() {
				continue // Prev of :: or Next of the last address
			}
			want := false
			for _, p := range prefixes {
				if p.Contains(a) {
					want = true
					break
				}
			}
			if got := s.contains(a); got != want {
				t.Fatalf("%d prefixes: contains(%v) = %v; want %v", n, a, got, want)
			}
			if a.Is4() {
				if got := s.contains(netip.AddrFrom16(a.As16())); got != want {
					t.Fatalf("%d prefixes: contains(mapped %v) = %v; want %v", n, a, got, want)
				}
			}
		}
	}
}

func TestIPSetNilAndInvalid(t *testing.T) {
	var s *ipSet
	if s.contains(netip.MustParseAddr("1.2.3.4")) {
		t.Error("nil set contains 1.2.3.4")
	}
	full := newIPSet(mustPrefixes(t, "0.0.0.0/0", "::/0"))
	if full.contains(netip.Addr{}) {
		t.Error("full set contains the zero Addr")
	}
}
