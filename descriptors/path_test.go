package descriptors

import (
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	tests := []struct{ in, want string }{
		// The variants of issue 8 item 5.
		{"/admin/user%73", "/admin/users"},
		{"//admin//users", "/admin/users"},
		{"/admin/./users", "/admin/users"},
		{"/x/../admin/users", "/admin/users"},
		{"/admin/users?x=/../y", "/admin/users"},
		{"/admin/users#frag", "/admin/users"},
		// Envoy's PathUtilityTest.NormalizeValidPaths / NormalizeCasePath cases
		// (test/common/http/path_utility_test.cc), which agree except for the hex case of
		// kept escapes.
		{"/xyz", "/xyz"},
		{"/x/y/z", "/x/y/z"},
		{"/a/b/../c", "/a/c"},
		{"/a/b/./c", "/a/b/c"},
		{"a/b/../c", "/a/c"},
		{"/a/b/../../../../c", "/c"},
		{"/a/..\\c", "/c"},
		{"/%c0%af", "/%C0%AF"},
		{"/%5c%25", "/%5C%25"},
		{"/a/b/%2E%2E/c", "/a/c"},
		{"/a/b/%2e%2e/c", "/a/c"},
		{"/a/b/%2E./c", "/a/c"},
		{"/a/b/%2E/c", "/a/b/c"},
		{"..", "/"},
		{"/../a/b", "/a/b"},
		{"/./a/b", "/a/b"},
		{"/A/B/C", "/A/B/C"},
		{"/a/%2F%2f/c", "/a/%2F%2F/c"},
		// Envoy's PathUtilityTest.MergeSlashes cases (after a leading slash is added).
		{"a//b/c", "/a/b/c"},
		{"/a//b/c/", "/a/b/c/"},
		{"/a/b/c//", "/a/b/c/"},
		{"/a////b/c", "/a/b/c"},
		{"//a/?b", "/a/"},
		// RFC 3986 5.2.4 trailing dot segments; ours.
		{"/a/b/..", "/a/"},
		{"/a/.", "/a/"},
		{"/a//../b", "/a/b"},
		{"", ""},
		{"/", "/"},
		{"/.hidden/..x/...", "/.hidden/..x/..."},
		{"/%7euser/%41%5a%30%2d%5f", "/~user/AZ0-_"},
		{"/a%zz", "/a%25zz"},
		{"/%%34%31", "/%2541"},
		{"/a%2", "/a%252"},
		{"%", "/%25"},
		{"\\\\a\\b", "/a/b"},
	}
	for _, tt := range tests {
		if got := NormalizePath(tt.in); got != tt.want {
			t.Errorf("NormalizePath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNormalizePathDoesNotAllocateForNormalPaths(t *testing.T) {
	for _, p := range []string{"/items", "/a/b.c/d..e/.f", "/x?y=//../"} {
		if n := testing.AllocsPerRun(100, func() { NormalizePath(p) }); n != 0 {
			t.Errorf("NormalizePath(%q): %v allocations", p, n)
		}
	}
}

func TestUpperASCII(t *testing.T) {
	for in, want := range map[string]string{"get": "GET", "GET": "GET", "Post": "POST", "": "", "g\xffe": "G\xffE"} {
		if got := upperASCII(in); got != want {
			t.Errorf("upperASCII(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzNormalizePath: the result is a canonical path (a leading slash, no empty, "." or ".."
// segment, no backslash, no escape of an unreserved character), of bounded length, and
// normalising it again changes nothing.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/admin/user%73", "//a/./b/../c", "a\\..\\b", "/%%34%31", "/%2F", "?x", ".."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := NormalizePath(in)
		if again := NormalizePath(got); again != got {
			t.Fatalf("NormalizePath(%q) = %q, but again %q", in, got, again)
		}
		if len(got) > 3*len(pathOnly(in))+1 {
			t.Fatalf("NormalizePath(%q) = %q: longer than allowed", in, got)
		}
		if got == "" {
			if pathOnly(in) != "" {
				t.Fatalf("NormalizePath(%q) = \"\"", in)
			}
			return
		}
		if got[0] != '/' || strings.Contains(got, "//") || strings.ContainsRune(got, '\\') {
			t.Fatalf("NormalizePath(%q) = %q", in, got)
		}
		for _, seg := range strings.Split(got[1:], "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("NormalizePath(%q) = %q keeps a dot segment", in, got)
			}
		}
		for i := 0; i+2 < len(got); i++ {
			if got[i] == '%' && (!isHex(got[i+1]) || !isHex(got[i+2]) || unreserved(unhex(got[i+1])<<4|unhex(got[i+2]))) {
				t.Fatalf("NormalizePath(%q) = %q: %q at %d", in, got, got[i:i+3], i)
			}
		}
	})
}

// FuzzTemplate: a template either fails to parse or is the concatenation of its parts, and
// expanding it never panics.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"{method}:{path}", "{host}/{path}x", "{", "}", "{nope}", "a{method}{{path}}", ""} {
		f.Add(s, "get", "/a/../b")
	}
	f.Fuzz(func(t *testing.T, tmpl, method, path string) {
		parts, err := parseTemplate(tmpl)
		if err != nil {
			if _, err := New(Config{Authz: AuthzConfig{Resource: tmpl}}); err == nil && tmpl != "" {
				t.Fatalf("New accepts %q, which parseTemplate refuses", tmpl)
			}
			return
		}
		var b strings.Builder
		for _, p := range parts {
			switch p.kind {
			case 0:
				if p.lit == "" || strings.ContainsAny(p.lit, "{}") {
					t.Fatalf("parseTemplate(%q): literal %q", tmpl, p.lit)
				}
				b.WriteString(p.lit)
			case fromMethod:
				b.WriteString("{method}")
			case fromPath:
				b.WriteString("{path}")
			case fromHost:
				b.WriteString("{host}")
			default:
				t.Fatalf("parseTemplate(%q): part kind %d", tmpl, p.kind)
			}
		}
		if b.String() != tmpl {
			t.Fatalf("parseTemplate(%q) parts spell %q", tmpl, b.String())
		}
		if tmpl == "" {
			return
		}
		m, err := New(Config{Authz: AuthzConfig{Resource: tmpl}})
		if err != nil {
			t.Fatalf("New refuses %q, which parseTemplate accepts: %v", tmpl, err)
		}
		e, err := m.Check(req{method: method, path: path, addr: "10.0.0.1"}.build())
		if err == nil && strings.Contains(tmpl, "{path}") && !strings.Contains(e.Resource, NormalizePath(path)) {
			t.Fatalf("resource %q of template %q lacks the normalised path %q", e.Resource, tmpl, NormalizePath(path))
		}
	})
}

func BenchmarkNormalizePath(b *testing.B) {
	for _, p := range []string{"/admin/users?x=1", "/x/../admin/./user%73//list"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				NormalizePath(p)
			}
		})
	}
}
