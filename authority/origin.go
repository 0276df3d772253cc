package authority

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// OriginError is an origin entry that cannot be used: empty, or written like an IP address or
// CIDR range but not a valid one.
type OriginError struct {
	Origin string // the entry as written
	Reason string // why it is rejected, e.g. "prefix length 33 is out of range 0-32 for IPv4"
}

func (e *OriginError) Error() string {
	if e.Origin == "" {
		return e.Reason
	}
	return fmt.Sprintf("invalid IP/CIDR origin %q: %s", e.Origin, e.Reason)
}

// LooksLikeIP reports whether s is written like an IP address or CIDR range, valid or not, and
// so is matched against IP origins rather than as a name. IPv4-like: digits and dots with at
// least one dot, optionally followed by "/bits" or ":port". IPv6-like: hex digits, colons (at
// least two) and dots, optionally in brackets, with a "%zone" or "/bits". Anything else, such as
// "serviceA" or "spiffe://cluster.local/ns/default/sa/web", is a name.
func LooksLikeIP(s string) bool {
	body := s
	if i := strings.IndexByte(body, '/'); i >= 0 {
		body = body[:i]
	}
	if i := strings.IndexByte(body, '%'); i >= 0 {
		body = body[:i]
	}
	if strings.HasPrefix(body, "[") {
		body = body[1:]
		if i := strings.IndexByte(body, ']'); i >= 0 {
			body = body[:i]
		}
		return looksLikeV6(body)
	}
	return looksLikeV4(body) || looksLikeV6(body)
}

// looksLikeV4 reports whether s is digits and dots (at least one dot, starting with a digit),
// optionally followed by ":digits".
func looksLikeV4(s string) bool {
	if host, port, ok := strings.Cut(s, ":"); ok {
		if port == "" || !allDigits(port) {
			return false
		}
		s = host
	}
	if s == "" || !isDigit(s[0]) {
		return false
	}
	dots := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			dots++
		case !isDigit(c):
			return false
		}
	}
	return dots > 0
}

// looksLikeV6 reports whether s is hex digits, colons and dots with at least two colons.
func looksLikeV6(s string) bool {
	colons := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ':':
			colons++
		case c == '.', isDigit(c), 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return colons >= 2
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// ValidateOrigin checks one origin entry of a rule. It returns nil for a name or a valid IP
// address or CIDR range, and an *OriginError saying why otherwise: the entry is empty, or it
// looks like an IP or CIDR (see LooksLikeIP) but is not a valid one.
func ValidateOrigin(s string) error {
	if s == "" {
		return &OriginError{Reason: "empty origin entry (a missing origin is handled by missing_origin)"}
	}
	if !LooksLikeIP(s) {
		return nil
	}
	_, err := parseEntry(s)
	return err
}

// parseEntry parses an IP or CIDR entry into a masked prefix. An IPv4-mapped IPv6 entry with a
// prefix length of 96 or more becomes the IPv4 prefix it denotes; a single address becomes a
// full-length prefix. Host bits below the prefix length are allowed and cleared.
func parseEntry(s string) (netip.Prefix, error) {
	bad := func(format string, args ...any) (netip.Prefix, error) {
		return netip.Prefix{}, &OriginError{Origin: s, Reason: fmt.Sprintf(format, args...)}
	}
	addrText, bitsText, hasBits := strings.Cut(s, "/")
	if strings.HasPrefix(addrText, "[") {
		return bad("brackets and ports are not allowed; write the bare address")
	}
	if strings.IndexByte(addrText, '%') >= 0 {
		return bad("an IPv6 zone is not allowed in a rule")
	}
	if looksLikeV4(addrText) && strings.IndexByte(addrText, ':') >= 0 {
		return bad("a port is not allowed; write the bare address")
	}
	addr, err := netip.ParseAddr(addrText)
	if err != nil {
		return bad("%s is not a valid IP address: %s", strconv.Quote(addrText), addrReason(addrText, err))
	}
	bits := addr.BitLen()
	if hasBits {
		switch {
		case bitsText == "":
			return bad("missing prefix length after \"/\"")
		case !allDigits(bitsText) || len(bitsText) > 3:
			return bad("prefix length %s is not a number", strconv.Quote(bitsText))
		case len(bitsText) > 1 && bitsText[0] == '0':
			return bad("prefix length %s has a leading zero", strconv.Quote(bitsText))
		}
		n, _ := strconv.Atoi(bitsText) // at most three digits, checked above
		if n > addr.BitLen() {
			family := "IPv6"
			if addr.Is4() {
				family = "IPv4"
			}
			return bad("prefix length %d is out of range 0-%d for %s", n, addr.BitLen(), family)
		}
		bits = n
	}
	if addr.Is4In6() && bits >= 96 {
		addr, bits = addr.Unmap(), bits-96
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		// Unreachable: bits is within 0..BitLen and addr has no zone.
		return bad("%v", err)
	}
	return p, nil
}

// addrReason is the reason netip gives for rejecting s, without its `ParseAddr("s"): ` lead.
func addrReason(s string, err error) string {
	msg := err.Error()
	return strings.TrimPrefix(msg, "ParseAddr("+strconv.Quote(s)+"): ")
}
