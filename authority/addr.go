package authority

import (
	"net/netip"
	"strings"
)

// This file parses a request's origin as an IP address without allocating. netip.ParseAddr
// allocates its error for every origin that is not an IP (a name such as "serviceA"), and Check
// must stay allocation-free, so origins go through parseAddr, which accepts exactly what
// netip.ParseAddr accepts for addresses without a zone (the tests compare the two).

// parseOrigin parses a request's origin as an IP address, ignoring any IPv6 zone and unmapping
// an IPv4-mapped IPv6 address. It returns the zero Addr when origin is not an IP.
func parseOrigin(origin string) netip.Addr {
	if i := strings.IndexByte(origin, '%'); i >= 0 {
		origin = origin[:i]
	}
	addr, ok := parseAddr(origin)
	if !ok {
		return netip.Addr{}
	}
	return addr.Unmap()
}

// parseAddr parses s, without a zone, as an IPv4 or IPv6 address.
func parseAddr(s string) (netip.Addr, bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			a, ok := parseV4(s)
			if !ok {
				return netip.Addr{}, false
			}
			return netip.AddrFrom4(a), true
		case ':':
			return parseV6(s)
		}
	}
	return netip.Addr{}, false
}

// parseV4 parses dotted-decimal s: four fields of 0-255, no leading zeros.
func parseV4(s string) ([4]byte, bool) {
	var out [4]byte
	field, val, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isDigit(c):
			if digits == 1 && val == 0 {
				return out, false // leading zero
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return out, false
			}
		case c == '.':
			if digits == 0 || field == 3 {
				return out, false
			}
			out[field] = byte(val)
			field, val, digits = field+1, 0, 0
		default:
			return out, false
		}
	}
	if field != 3 || digits == 0 {
		return out, false
	}
	out[3] = byte(val)
	return out, true
}

// parseV6 parses s as colon-hex IPv6, with at most one "::" and an optional dotted IPv4 tail.
func parseV6(s string) (netip.Addr, bool) {
	var ip [16]byte
	ellipsis := -1 // index in ip where "::" stands, if any
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		ellipsis = 0
		s = s[2:]
		if s == "" {
			return netip.AddrFrom16(ip), true
		}
	}
	i := 0
	for i < 16 {
		acc, off := 0, 0
		for off < len(s) {
			v, ok := hexVal(s[off])
			if !ok {
				break
			}
			acc = acc<<4 | v
			off++
			if off > 4 {
				return netip.Addr{}, false
			}
		}
		if off == 0 {
			return netip.Addr{}, false
		}
		if off < len(s) && s[off] == '.' {
			// A dotted IPv4 tail takes the last four bytes.
			if (ellipsis < 0 && i != 12) || i+4 > 16 {
				return netip.Addr{}, false
			}
			a, ok := parseV4(s)
			if !ok {
				return netip.Addr{}, false
			}
			copy(ip[i:], a[:])
			i += 4
			s = ""
			break
		}
		ip[i], ip[i+1] = byte(acc>>8), byte(acc)
		i += 2
		s = s[off:]
		if s == "" {
			break
		}
		if s[0] != ':' || len(s) == 1 {
			return netip.Addr{}, false
		}
		s = s[1:]
		if s[0] == ':' {
			if ellipsis >= 0 {
				return netip.Addr{}, false
			}
			ellipsis = i
			s = s[1:]
			if s == "" {
				break
			}
		}
	}
	if s != "" {
		return netip.Addr{}, false
	}
	if i < 16 {
		if ellipsis < 0 {
			return netip.Addr{}, false
		}
		n := 16 - i
		copy(ip[ellipsis+n:], ip[ellipsis:i])
		clear(ip[ellipsis : ellipsis+n])
	} else if ellipsis >= 0 {
		return netip.Addr{}, false // "::" must stand for at least one group
	}
	return netip.AddrFrom16(ip), true
}

func hexVal(c byte) (int, bool) {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0'), true
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10, true
	}
	return 0, false
}
