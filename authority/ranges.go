package authority

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
)

// ipSet is a set of IP addresses built from prefixes: per family, sorted, merged,
// non-overlapping, non-adjacent inclusive ranges, searched by binary search, so a lookup costs
// O(log n) whatever the number and nesting of the prefixes. IPv4 and IPv6 are kept apart: an
// IPv4 address (an IPv4-mapped IPv6 one included, once unmapped) is looked up among the IPv4
// ranges only. The zero value is empty. An ipSet is immutable once built.
type ipSet struct {
	v4 []range4
	v6 []range6
}

type range4 struct{ lo, hi uint32 }

// u128 is a 128-bit unsigned integer, an IPv6 address read big-endian.
type u128 struct{ hi, lo uint64 }

func (a u128) cmp(b u128) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// next returns a+1 and whether it overflowed.
func (a u128) next() (u128, bool) {
	lo := a.lo + 1
	hi := a.hi
	if lo == 0 {
		hi++
		return u128{hi, lo}, hi == 0
	}
	return u128{hi, lo}, false
}

type range6 struct{ lo, hi u128 }

// newIPSet builds the set of the addresses in prefixes, which must be valid and masked, with
// IPv4 ones unmapped (as parseEntry returns them).
func newIPSet(prefixes []netip.Prefix) *ipSet {
	s := &ipSet{}
	for _, p := range prefixes {
		if p.Addr().Is4() {
			s.v4 = append(s.v4, range4Of(p))
		} else {
			s.v6 = append(s.v6, range6Of(p))
		}
	}
	s.v4 = merge4(s.v4)
	s.v6 = merge6(s.v6)
	return s
}

func range4Of(p netip.Prefix) range4 {
	a := p.Addr().As4()
	lo := binary.BigEndian.Uint32(a[:])
	host := uint32(1)<<(32-p.Bits()) - 1 // a shift by 32 gives 0, so /0 makes all ones
	return range4{lo: lo, hi: lo | host}
}

func range6Of(p netip.Prefix) range6 {
	a := p.Addr().As16()
	lo := u128{binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])}
	hi := lo
	host := 128 - p.Bits()
	if host >= 64 {
		hi.lo = ^uint64(0)
		hi.hi |= uint64(1)<<(host-64) - 1 // a shift by 64 gives 0: all ones
	} else {
		hi.lo |= uint64(1)<<host - 1
	}
	return range6{lo: lo, hi: hi}
}

// merge4 sorts rs and joins overlapping and adjacent ranges, in place.
func merge4(rs []range4) []range4 {
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, func(a, b range4) int { return cmp.Compare(a.lo, b.lo) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if last.hi == ^uint32(0) || r.lo <= last.hi+1 {
			last.hi = max(last.hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return slices.Clip(out)
}

// merge6 sorts rs and joins overlapping and adjacent ranges, in place.
func merge6(rs []range6) []range6 {
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, func(a, b range6) int { return a.lo.cmp(b.lo) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		after, overflow := last.hi.next()
		if overflow || r.lo.cmp(after) <= 0 {
			if r.hi.cmp(last.hi) > 0 {
				last.hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	return slices.Clip(out)
}

// contains reports whether addr is in the set; an IPv4-mapped IPv6 addr is looked up as the
// IPv4 address it wraps. It does not allocate.
func (s *ipSet) contains(addr netip.Addr) bool {
	if s == nil || !addr.IsValid() {
		return false
	}
	addr = addr.Unmap()
	if addr.Is4() {
		a := addr.As4()
		x := binary.BigEndian.Uint32(a[:])
		// Find the first range starting above x; the one before it is the only candidate.
		lo, hi := 0, len(s.v4)
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if s.v4[m].lo <= x {
				lo = m + 1
			} else {
				hi = m
			}
		}
		return lo > 0 && x <= s.v4[lo-1].hi
	}
	a := addr.As16()
	x := u128{binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])}
	lo, hi := 0, len(s.v6)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.v6[m].lo.cmp(x) <= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo > 0 && x.cmp(s.v6[lo-1].hi) <= 0
}

// size is the number of merged ranges held, for tests.
func (s *ipSet) size() int {
	if s == nil {
		return 0
	}
	return len(s.v4) + len(s.v6)
}
