package authority

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func BenchmarkCheckName(b *testing.B) {
	origins := make([]string, 100)
	for i := range origins {
		origins[i] = fmt.Sprintf("service-%03d", i)
	}
	l, err := New([]Rule{
		{Resource: "GET:/hello", Strategy: White, Origins: origins},
		{Resource: "GET:/hello", Strategy: Black, Origins: []string{"service-000"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, ok := l.Check("GET:/hello", "service-042"); !ok {
		b.Fatal("service-042 is blocked")
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := l.Check("GET:/hello", "service-042"); !ok {
				b.Fatal("service-042 is blocked")
			}
		}
	})
}

// benchCIDREntries returns n random prefixes, half IPv4 and half IPv6, from a fixed seed, and
// probe origins: addresses inside and just outside some of the ranges, both families.
func benchCIDREntries(n int) (entries, probes []string) {
	r := rand.New(rand.NewPCG(42, 43))
	entries = make([]string, n)
	for i := range entries {
		var p netip.Prefix
		if i%2 == 0 {
			var a [4]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			p = netip.PrefixFrom(netip.AddrFrom4(a), 12+r.IntN(21)).Masked()
		} else {
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			p = netip.PrefixFrom(netip.AddrFrom16(a), 16+r.IntN(113)).Masked()
		}
		entries[i] = p.String()
		if i%100 == 0 {
			probes = append(probes, p.Addr().String(), lastAddr(p).String(), lastAddr(p).Next().String())
		}
	}
	return entries, probes
}

// benchCIDRList compiles one white list of benchCIDREntries(n).
func benchCIDRList(b *testing.B, n int) (*List, []string) {
	b.Helper()
	entries, probes := benchCIDREntries(n)
	l, err := New([]Rule{{Resource: "r", Strategy: White, Origins: entries}})
	if err != nil {
		b.Fatal(err)
	}
	return l, probes
}

func BenchmarkCheckCIDR10000(b *testing.B) {
	l, probes := benchCIDRList(b, 10000)
	allowed := 0
	for _, p := range probes {
		if _, ok := l.Check("r", p); ok {
			allowed++
		}
	}
	if allowed == 0 || allowed == len(probes) {
		b.Fatalf("%d of %d probes allowed; want a mix", allowed, len(probes))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Check("r", probes[i%len(probes)])
			i++
		}
	})
}

// BenchmarkCheckCIDR10000Name checks a name origin against a rule with 10,000 ranges: the
// origin is not an IP, and finding that out must not allocate.
func BenchmarkCheckCIDR10000Name(b *testing.B) {
	l, _ := benchCIDRList(b, 10000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := l.Check("r", "serviceA"); ok {
				b.Fatal("serviceA is allowed")
			}
		}
	})
}

func BenchmarkNewCIDR10000(b *testing.B) {
	entries, _ := benchCIDREntries(10000)
	rules := []Rule{{Resource: "r", Strategy: White, Origins: entries}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(rules); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCheckDoesNotAllocate(t *testing.T) {
	l, err := New([]Rule{
		{Resource: "r", Strategy: White, Origins: []string{"serviceA", "10.0.0.0/8", "2001:db8::/32"}},
		{Resource: "r", Strategy: Black, Origins: []string{"10.6.6.6", "evil"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, origin := range []string{"serviceA", "serviceB", "10.1.2.3", "10.6.6.6", "::ffff:10.1.2.3",
		"2001:db8::1", "fe80::1%eth0", "300.1.2.3", "1:2:3", ""} {
		if n := testing.AllocsPerRun(100, func() { l.Check("r", origin) }); n != 0 {
			t.Errorf("Check(r, %q) allocates %v times; want 0", origin, n)
		}
	}
}
