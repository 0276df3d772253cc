package descriptors

import "strings"

// NormalizePath returns the path of a request target (its query and fragment cut off) as an
// origin server resolves it, so that spellings of one path name one resource:
//
//   - A backslash is a slash (as in Envoy's PathUtil::canonicalPath, which follows Chromium's
//     URL canonicaliser: "/a/..\b" is "/b").
//   - A percent-encoded unreserved character (RFC 3986 2.3: letters, digits, "-", ".", "_",
//     "~") is decoded: "/admin/user%73" is "/admin/users", "%2E%2E" is "..".
//   - A "%" that starts no escape is encoded as "%25".
//   - Any other percent-encoding is kept, its hex digits upper-cased (RFC 3986 6.2.2.1). An
//     encoded slash or backslash ("%2F", "%5C") in particular is kept as it is: it is data inside
//     a segment, not a separator, as for Envoy's router under path_with_escaped_slashes_action
//     KEEP_UNCHANGED. The shipped envoy.yaml sets REJECT_REQUEST, so through it such a path
//     never arrives.
//   - Dot segments are removed (RFC 3986 5.2.4): "/x/../admin/./users" is "/admin/users"; ".."
//     above the root stays at the root.
//   - Then runs of slashes are merged: "//admin//users" is "/admin/users" (Envoy's
//     merge_slashes, which Envoy also applies after normalize_path).
//   - A path that does not start with a slash gets one; "" stays "".
//
// The result is no longer than the path plus one byte and two per stray "%", and NormalizePath
// is idempotent.
// A path that needs none of this is returned as it is, without allocating.
func NormalizePath(target string) string {
	p := pathOnly(target)
	if !needsNormalizing(p) {
		return p
	}
	b := make([]byte, 0, len(p)+1)
	if p[0] != '/' && p[0] != '\\' {
		b = append(b, '/')
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			b = append(b, '/')
		case c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]):
			if d := unhex(p[i+1])<<4 | unhex(p[i+2]); unreserved(d) {
				b = append(b, d)
			} else {
				b = append(b, '%', upperHex(p[i+1]), upperHex(p[i+2]))
			}
			i += 2
		case c == '%':
			b = append(b, "%25"...) // a stray "%": decoding what follows must not make an escape
		default:
			b = append(b, c)
		}
	}
	return mergeSlashes(removeDotSegments(string(b)))
}

// needsNormalizing reports whether NormalizePath would change p.
func needsNormalizing(p string) bool {
	if p == "" {
		return false
	}
	if p[0] != '/' || strings.ContainsAny(p, "%\\") || strings.Contains(p, "//") {
		return true
	}
	// A "." or ".." segment.
	for i := 0; i < len(p); i++ {
		if p[i] != '/' || i+1 >= len(p) || p[i+1] != '.' {
			continue
		}
		rest := p[i+2:]
		if rest == "" || rest[0] == '/' || rest[0] == '.' && (len(rest) == 1 || rest[1] == '/') {
			return true
		}
	}
	return false
}

// removeDotSegments removes "." and ".." segments from p, which starts with "/" (RFC 3986
// 5.2.4): a final "." or ".." leaves a trailing slash, ".." above the root is dropped.
func removeDotSegments(p string) string {
	if !strings.Contains(p, "/.") {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := segs[:0]
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
			continue
		}
		if last {
			out = append(out, "")
		}
	}
	return "/" + strings.Join(out, "/")
}

// mergeSlashes replaces every run of slashes in p with one.
func mergeSlashes(p string) string {
	if !strings.Contains(p, "//") {
		return p
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && len(b) > 0 && b[len(b)-1] == '/' {
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
}

// upperASCII upper-cases the ASCII letters of s (an HTTP method) and leaves every other byte
// as it is, allocating only when a letter is lower-case.
func upperASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'a' <= b[j] && b[j] <= 'z' {
					b[j] -= 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
