package descriptors

import (
	"net/netip"
	"net/url"
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/hotparam"
)

// Entry is one request (or descriptor) mapped for the rule engines: the hot-parameter entry
// itself, handed to hotparam as it is, and the origin the authority rules read.
type Entry struct {
	hotparam.Entry
	Origin string // "" when none
}

// view is one check request being mapped.
type view struct {
	attrs *authv3.AttributeContext
	http  *authv3.AttributeContext_HttpRequest
}

// Check maps an ext_authz check request to an entry. See CheckInto.
func (m *Mapper) Check(req *authv3.CheckRequest) (Entry, error) {
	var e Entry
	err := m.CheckInto(&e, req)
	return e, err
}

// CheckInto maps an ext_authz check request into e, reusing the capacity of e.Params and of
// their Values. The resource is the route's context extension "resource" when set, else the
// template, whose {path} is normalised (NormalizePath) and {method} upper-cased, as are the
// path and method sources; the origin is the first origin source that yields a value; a param whose source
// yields nothing is left out. Params come in name order. Strings in e may share memory with req.
//
// It returns a *RequestError wrapping ErrNoAttributes when req has no HTTP request,
// ErrValueTooLong for a resource longer than MaxLen, and, for an origin or param that a rule on
// the resource reads (every one, unless the mapper was built WithUses), ErrValueTooLong for a
// value longer than MaxLen and ErrTooManyValues for more than MaxValues values. An origin or
// param over a limit that no rule reads is left out.
func (m *Mapper) CheckInto(e *Entry, req *authv3.CheckRequest) error {
	attrs := req.GetAttributes()
	http := attrs.GetRequest().GetHttp()
	params := e.Params[:0]
	*e = Entry{}
	if http == nil {
		return &RequestError{Field: "attributes.request.http", Descriptor: -1, Err: ErrNoAttributes}
	}
	v := view{attrs: attrs, http: http}

	if r := attrs.GetContextExtensions()[ResourceExtension]; r != "" {
		e.Resource = r
	} else {
		e.Resource = m.expand(&v)
	}
	if len(e.Resource) > MaxLen {
		return &RequestError{Field: "resource", Descriptor: -1, Err: ErrValueTooLong}
	}

	var buf [2]string
	for _, src := range m.origin {
		vals, err := m.values(buf[:0], &v, src)
		if err != nil {
			if m.uses == nil || m.uses.UsesOrigin(e.Resource) {
				return &RequestError{Field: "origin", Descriptor: -1, Err: err}
			}
			break // no rule reads the origin: none
		}
		if len(vals) > 0 {
			e.Origin = vals[0]
			break
		}
	}

	for _, p := range m.params {
		n := len(params)
		if n < cap(params) {
			params = params[:n+1]
		} else {
			params = append(params, hotparam.Param{})
		}
		vals, err := m.values(params[n].Values[:0], &v, p.src)
		if err != nil {
			if m.uses == nil || m.uses.UsesParam(e.Resource, p.name) {
				e.Params = params[:n]
				return &RequestError{Field: "params." + p.name, Descriptor: -1, Err: err}
			}
			vals = vals[:0] // no rule reads the param: left out
		}
		if len(vals) == 0 {
			params[n].Values = vals
			params = params[:n]
			continue
		}
		params[n].Name = p.name
		params[n].Values = vals
	}
	e.Params = params
	return nil
}

// expand fills the resource template.
func (m *Mapper) expand(v *view) string {
	if len(m.resource) == 1 {
		return m.single(v, m.resource[0])
	}
	n := 0
	for _, p := range m.resource {
		n += len(m.single(v, p))
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range m.resource {
		b.WriteString(m.single(v, p))
	}
	return b.String()
}

func (m *Mapper) single(v *view, p part) string {
	switch p.kind {
	case fromMethod:
		return upperASCII(v.http.GetMethod())
	case fromPath:
		return NormalizePath(v.http.GetPath())
	case fromHost:
		return v.http.GetHost()
	}
	return p.lit
}

// values appends the values src yields to dst, split when src says so. Empty values are left
// out. It fails with ErrValueTooLong or ErrTooManyValues.
func (m *Mapper) values(dst []string, v *view, src source) ([]string, error) {
	start := len(dst)
	switch src.kind {
	case fromHeader:
		dst = appendValue(dst, header(v.http, src.name), src.split)
	case fromQuery:
		dst = appendQuery(dst, v.http.GetPath(), src.name, src.split)
	case fromCookie:
		dst = appendCookie(dst, header(v.http, "cookie"), src.name, src.split)
	case fromClientIP:
		dst = appendValue(dst, m.clientIP(v), src.split)
	case fromHost:
		dst = appendValue(dst, v.http.GetHost(), src.split)
	case fromMethod:
		dst = appendValue(dst, upperASCII(v.http.GetMethod()), src.split)
	case fromPath:
		dst = appendValue(dst, NormalizePath(v.http.GetPath()), src.split)
	case fromPrincipal:
		dst = appendValue(dst, v.attrs.GetSource().GetPrincipal(), src.split)
	case fromExtension:
		dst = appendValue(dst, v.attrs.GetContextExtensions()[src.name], src.split)
	case fromMetadata:
		dst = appendValue(dst, metadataString(v.attrs, src), src.split)
	}
	if len(dst)-start > MaxValues {
		return dst[:start], ErrTooManyValues
	}
	for _, s := range dst[start:] {
		if len(s) > MaxLen {
			return dst[:start], ErrValueTooLong
		}
	}
	return dst, nil
}

// metadataString walks src.path in the filter metadata src.name of the request's
// metadata_context to a string; "" when a key is missing or the leaf is not a string.
func metadataString(attrs *authv3.AttributeContext, src source) string {
	st := attrs.GetMetadataContext().GetFilterMetadata()[src.name]
	for i, key := range src.path {
		f := st.GetFields()[key]
		if i == len(src.path)-1 {
			return f.GetStringValue()
		}
		st = f.GetStructValue()
	}
	return ""
}

// appendValue appends s, or its non-empty pieces around sep, trimmed of spaces. It stops after
// MaxValues+1 values, enough for the caller to see there are too many.
func appendValue(dst []string, s, sep string) []string {
	if sep == "" {
		if s != "" {
			dst = append(dst, s)
		}
		return dst
	}
	start := len(dst)
	for s != "" && len(dst)-start <= MaxValues {
		piece, rest, found := strings.Cut(s, sep)
		if piece = strings.TrimSpace(piece); piece != "" {
			dst = append(dst, piece)
		}
		if !found {
			break
		}
		s = rest
	}
	return dst
}

// header returns the value of the header name (lower case), matching keys case-insensitively.
// Envoy joins a repeated header with ","; raw headers (encode_raw_headers) are joined the same
// way.
func header(h *authv3.AttributeContext_HttpRequest, name string) string {
	hs := h.GetHeaders()
	if s, ok := hs[name]; ok {
		return s
	}
	for k, s := range hs {
		if strings.EqualFold(k, name) {
			return s
		}
	}
	var joined string
	n := 0
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		if !strings.EqualFold(hv.GetKey(), name) {
			continue
		}
		s := hv.GetValue()
		if raw := hv.GetRawValue(); len(raw) > 0 {
			s = string(raw)
		}
		if n == 0 {
			joined = s
		} else {
			joined += "," + s
		}
		n++
	}
	return joined
}

// pathOnly cuts the query and fragment off a request target.
func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// appendQuery appends the values of the query parameter name in the request target p; a
// repeated parameter gives several values.
func appendQuery(dst []string, p, name, sep string) []string {
	i := strings.IndexByte(p, '?')
	if i < 0 {
		return dst
	}
	q := p[i+1:]
	if j := strings.IndexByte(q, '#'); j >= 0 {
		q = q[:j]
	}
	start := len(dst)
	for q != "" && len(dst)-start <= MaxValues {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, val, _ := strings.Cut(kv, "=")
		if unescape(k) != name {
			continue
		}
		dst = appendValue(dst, unescape(val), sep)
	}
	return dst
}

// unescape decodes a query component; one that does not decode is kept as it is.
func unescape(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	u, err := url.QueryUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// appendCookie appends the values of the cookie name in a Cookie header. Pairs are separated
// by ";" and also by ",": Envoy joins repeated cookie headers (HTTP/1.1 clients sending several,
// or several header_map entries) with "," in the CheckRequest, and a cookie value cannot hold
// a "," (RFC 6265 4.1.1), so every cookie sent is found whichever way it was split.
func appendCookie(dst []string, h, name, sep string) []string {
	start := len(dst)
	for h != "" && len(dst)-start <= MaxValues {
		var c string
		if i := strings.IndexAny(h, ";,"); i >= 0 {
			c, h = h[:i], h[i+1:]
		} else {
			c, h = h, ""
		}
		k, val, ok := strings.Cut(strings.TrimSpace(c), "=")
		if !ok || k != name {
			continue
		}
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		dst = appendValue(dst, val, sep)
	}
	return dst
}

// clientIP is the client address Envoy's connection manager settles on with
// xff_num_trusted_hops = trusted_hops (ConnectionManagerUtility::mutateRequestHeaders): with 0
// the TCP peer, which is the CheckRequest's source address (CheckRequestUtils::
// setAttrContextPeer), never x-forwarded-for; with N > 0 the entry Utility::
// getLastAddressFromXFF(xff, N-1) picks from the x-forwarded-for Envoy received. The service
// sees that header after Envoy appended its peer, so here N entries are skipped from the right
// and the next one taken. Too few entries, or one that is not an IP address: the peer, as in
// Envoy. (This assumes Envoy appends to x-forwarded-for: use_remote_address true, the default
// skip_xff_append false.)
func (m *Mapper) clientIP(v *view) string {
	if m.hops > 0 {
		if a, ok := xffEntry(header(v.http, "x-forwarded-for"), m.hops); ok {
			return a
		}
	}
	return v.attrs.GetSource().GetAddress().GetSocketAddress().GetAddress()
}

// xffEntry skips skip entries of xff from the right and returns the next one, trimmed, when it
// is an IP address (without a zone), in its canonical form.
func xffEntry(xff string, skip int) (string, bool) {
	for i := 0; i < skip; i++ {
		j := strings.LastIndexByte(xff, ',')
		if j < 0 {
			return "", false
		}
		xff = xff[:j]
	}
	if j := strings.LastIndexByte(xff, ','); j >= 0 {
		xff = xff[j+1:]
	}
	a, err := netip.ParseAddr(strings.TrimSpace(xff))
	if err != nil || a.Zone() != "" {
		return "", false
	}
	return a.String(), true
}
