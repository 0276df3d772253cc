package admin

import (
	"net"
	"net/http"
	"strings"
)

// hostFilter answers only requests whose Host header names the listener: a loopback name
// (localhost, or a name under .localhost), an IP address (what the kubelet's probes and
// Prometheus send), or one of names. A page that a DNS rebinding points at the listener
// carries its own name, and is refused with 421 before any handler runs.
type hostFilter struct {
	exact    map[string]struct{} // lower case
	suffixes []string            // ".example.org" for "*.example.org", lower case
	next     http.Handler
}

func newHostFilter(names []string, next http.Handler) *hostFilter {
	f := &hostFilter{exact: make(map[string]struct{}, len(names)), next: next}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		if s, ok := strings.CutPrefix(n, "*"); ok {
			f.suffixes = append(f.suffixes, s)
			continue
		}
		f.exact[n] = struct{}{}
	}
	return f
}

// allowed reports whether host (a Host header: a name or address, with or without a port)
// is one the listener answers to. An empty Host (HTTP/1.0) is allowed: browsers always send
// one.
func (f *hostFilter) allowed(host string) bool {
	if host == "" {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(name, "]"), "["), ".")
	if net.ParseIP(name) != nil {
		return true
	}
	name = strings.ToLower(name)
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	if _, ok := f.exact[name]; ok {
		return true
	}
	for _, s := range f.suffixes {
		if len(name) > len(s) && strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

func (f *hostFilter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !f.allowed(r.Host) {
		writeText(w, http.StatusMisdirectedRequest,
			"this admin listener does not answer to the name in the Host header; add it to admin.hosts to reach it by that name\n")
		return
	}
	f.next.ServeHTTP(w, r)
}
