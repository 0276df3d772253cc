package envoysim

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Filter names the shipped configs use as typed_per_filter_config keys.
const (
	RateLimitFilter = "envoy.filters.http.ratelimit"
	ExtAuthzFilter  = "envoy.filters.http.ext_authz"
)

// Request is an HTTP request as it arrives at Envoy's listener; Config.Accept turns it into
// the Stream the filters see.
type Request struct {
	Method string
	Path   string // with the query string, as in :path
	Host   string // :authority
	Scheme string // :scheme as sent; "" lets the connection manager set it
	// Headers holds the request headers by lower-case name; a name may repeat.
	Headers map[string][]string
	// Remote is the TCP peer of the downstream connection, as Envoy reports it: an IPv4-mapped
	// IPv6 address (one a PROXY protocol header gives) stays mapped everywhere Envoy names it.
	Remote netip.AddrPort
	// Local is the address of Envoy's the connection reached (its listener's, or the one a
	// PROXY protocol header names); when valid it is the CheckRequest's destination.
	Local netip.AddrPort
	// TLS reports a TLS downstream connection (x-forwarded-proto https).
	TLS bool
	// Principal is the peer certificate's identity on an mTLS listener, else "": as Envoy
	// picks it, its first URI SAN, else its first DNS SAN, else its subject.
	Principal string
	// LocalPrincipal is the listener certificate's identity on a TLS listener, picked the
	// same way: the CheckRequest's destination principal.
	LocalPrincipal string
	// PeerCertificate is the client's certificate (PEM) on an mTLS listener: the CheckRequest's
	// source certificate under include_peer_certificate.
	PeerCertificate []byte
	// Protocol is "HTTP/1.0", "HTTP/1.1" (when "") , "HTTP/2" or "HTTP/3".
	Protocol string
	// DynamicMetadata is the stream's dynamic metadata by namespace, as the filters before the
	// rate-limit filter set it (ext_authz's answer: envoyapi.MetadataNamespace), for metadata
	// actions of source DYNAMIC.
	DynamicMetadata map[string]*structpb.Struct
}

// clone copies r deeply enough for Accept to change its headers.
func (r Request) clone() Request {
	h := make(map[string][]string, len(r.Headers)+4)
	for k, v := range r.Headers {
		h[strings.ToLower(k)] = append([]string(nil), v...)
	}
	r.Headers = h
	return r
}

// scheme is the connection's own scheme.
func (r Request) scheme() string {
	if r.TLS {
		return "https"
	}
	return "http"
}

// header returns the values of the lower-case header name, pseudo-headers included.
func (r Request) header(name string) []string {
	switch name {
	case ":method":
		return nonEmpty(r.Method)
	case ":path":
		return nonEmpty(r.Path)
	case ":authority":
		return nonEmpty(r.Host)
	case ":scheme":
		if r.Scheme == "" {
			return []string{r.scheme()}
		}
		return []string{r.Scheme}
	}
	return r.Headers[name]
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// pathOnly is the path without its query string.
func (r Request) pathOnly() string {
	p, _, _ := strings.Cut(r.Path, "?")
	return p
}

// Entry is one key and value of a rate-limit descriptor.
type Entry struct {
	Key   string
	Value string
}

// Descriptor is one rate-limit descriptor Envoy sends to the rate-limit service.
type Descriptor struct {
	Entries []Entry
	// HitsAddend is the descriptor's own hits when HasHitsAddend; a configured number 0 is
	// kept and sent as an explicit 0 (RateLimitPolicy::populateDescriptors), which overrides the
	// request-level hits_addend.
	HitsAddend     uint64
	HasHitsAddend  bool
	IsNegativeHits bool
	// OnStreamDone marks a descriptor sent when the stream ends rather than on the request.
	OnStreamDone bool
	// XRateLimitOption is the descriptor's x_ratelimit_option: whether Envoy builds
	// x-ratelimit-* headers from its status (UNSPECIFIED: the filter's setting).
	XRateLimitOption routev3.RateLimit_XRateLimitOption
}

// Proto returns the descriptor as the rate-limit service receives it.
func (d Descriptor) Proto() *ratelimitcommonv3.RateLimitDescriptor {
	p := &ratelimitcommonv3.RateLimitDescriptor{IsNegativeHits: d.IsNegativeHits}
	for _, e := range d.Entries {
		p.Entries = append(p.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	if d.HasHitsAddend {
		p.HitsAddend = wrapperspb.UInt64(d.HitsAddend)
	}
	return p
}

// Value returns the value of key in the descriptor and whether it is there.
func (d Descriptor) Value(key string) (string, bool) {
	for _, e := range d.Entries {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// Descriptors derives the descriptors route's RateLimitPerRoute produces for req, on the request
// path and at stream end (OnStreamDone), in config order, with req.Remote's address as the
// downstream remote address. Config.Descriptors does the same for a Stream.
//
// As in Envoy's RateLimitPolicy::populateDescriptors (ratelimit_config.cc), an action that
// yields no entry drops its whole descriptor unless it is skip_if_absent, whose absence adds
// nothing; a descriptor whose actions were all skipped is still sent, without entries. As in
// RateLimitPolicy's constructor, stage, disable_key and a hits_addend with neither or both of
// number and format are refused. It returns an error for an action or option this derivation
// does not model (so a config using one is never checked against a wrong guess).
func Descriptors(route *routev3.Route, req Request) ([]Descriptor, error) {
	return deriveDescriptors(route, req, req.Remote.Addr())
}

func deriveDescriptors(route *routev3.Route, req Request, client netip.Addr) ([]Descriptor, error) {
	var per ratelimitv3.RateLimitPerRoute
	ok, err := unpack(route, RateLimitFilter, &per)
	if err != nil || !ok {
		return nil, err
	}
	var bad []string
	if per.GetVhRateLimits() != ratelimitv3.RateLimitPerRoute_OVERRIDE {
		bad = append(bad, "vh_rate_limits "+per.GetVhRateLimits().String())
	}
	if per.GetOverrideOption() != ratelimitv3.RateLimitPerRoute_DEFAULT {
		bad = append(bad, "override_option "+per.GetOverrideOption().String())
	}
	if per.GetDomain() != "" {
		bad = append(bad, "domain")
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("route %q: RateLimitPerRoute: not modelled: %s", route.GetName(), strings.Join(bad, ", "))
	}
	var out []Descriptor
	for i, rl := range per.GetRateLimits() {
		d, ok, err := descriptor(rl, req, client)
		if err != nil {
			return nil, fmt.Errorf("route %q: rate_limits[%d]: %w", route.GetName(), i, err)
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

func descriptor(rl *routev3.RateLimit, req Request, client netip.Addr) (Descriptor, bool, error) {
	// RateLimitPolicy::RateLimitPolicy refuses these; Envoy would not load the config.
	if rl.GetStage() != nil || rl.GetDisableKey() != "" {
		return Descriptor{}, false, fmt.Errorf("envoy refuses it: 'stage' field and 'disable_key' field are not supported")
	}
	if rl.GetLimit() != nil {
		return Descriptor{}, false, fmt.Errorf("limit overrides are not modelled")
	}
	d := Descriptor{OnStreamDone: rl.GetApplyOnStreamDone(), XRateLimitOption: rl.GetXRatelimitOption()}
	if h := rl.GetHitsAddend(); h != nil {
		switch {
		case h.GetFormat() != "" && h.GetNumber() != nil, h.GetFormat() == "" && h.GetNumber() == nil:
			return Descriptor{}, false, fmt.Errorf("envoy refuses it: hits_addend must contain either a format or a number")
		case h.GetFormat() != "":
			return Descriptor{}, false, fmt.Errorf("hits_addend.format is not modelled")
		}
		d.HitsAddend, d.HasHitsAddend = h.GetNumber().GetValue(), true
		d.IsNegativeHits = h.GetIsNegativeHits()
	}
	for j, a := range rl.GetActions() {
		e, ok, err := action(a, req, client)
		if err != nil {
			return Descriptor{}, false, fmt.Errorf("actions[%d]: %w", j, err)
		}
		switch {
		case ok:
			d.Entries = append(d.Entries, e)
		case !skipIfAbsent(a):
			return Descriptor{}, false, nil
		}
	}
	return d, true, nil
}

func skipIfAbsent(a *routev3.RateLimit_Action) bool {
	switch s := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_RequestHeaders_:
		return s.RequestHeaders.GetSkipIfAbsent()
	case *routev3.RateLimit_Action_QueryParameters_:
		return s.QueryParameters.GetSkipIfAbsent()
	case *routev3.RateLimit_Action_Metadata:
		return s.Metadata.GetSkipIfAbsent()
	}
	return false
}

// metadataEntry is the entry of a metadata action, as MetaDataAction::populateDescriptor
// makes it: the string at the metadata key's path (a value that is no string counts as
// none), else default_value; none when both are empty. Only the stream's dynamic metadata
// (source DYNAMIC) is modelled.
func metadataEntry(m *routev3.RateLimit_Action_MetaData, req Request) (Entry, bool, error) {
	if m.GetSource() != routev3.RateLimit_Action_MetaData_DYNAMIC {
		return Entry{}, false, fmt.Errorf("metadata action source %v is not modelled", m.GetSource())
	}
	st := req.DynamicMetadata[m.GetMetadataKey().GetKey()]
	var v *structpb.Value
	for i, seg := range m.GetMetadataKey().GetPath() {
		if i > 0 {
			st = v.GetStructValue()
		}
		v = st.GetFields()[seg.GetKey()]
	}
	if s := v.GetStringValue(); s != "" {
		return Entry{Key: m.GetDescriptorKey(), Value: s}, true, nil
	}
	if d := m.GetDefaultValue(); d != "" {
		return Entry{Key: m.GetDescriptorKey(), Value: d}, true, nil
	}
	return Entry{}, false, nil
}

// action returns the entry one action appends, or false when it appends none.
func action(a *routev3.RateLimit_Action, req Request, client netip.Addr) (Entry, bool, error) {
	switch s := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_Metadata:
		return metadataEntry(s.Metadata, req)
	case *routev3.RateLimit_Action_GenericKey_:
		key := s.GenericKey.GetDescriptorKey()
		if key == "" {
			key = "generic_key"
		}
		return Entry{Key: key, Value: s.GenericKey.GetDescriptorValue()}, true, nil
	case *routev3.RateLimit_Action_RequestHeaders_:
		v := req.header(strings.ToLower(s.RequestHeaders.GetHeaderName()))
		if len(v) == 0 {
			return Entry{}, false, nil
		}
		// Envoy takes the first value of a repeated header.
		return Entry{Key: s.RequestHeaders.GetDescriptorKey(), Value: v[0]}, true, nil
	case *routev3.RateLimit_Action_QueryParameters_:
		v, ok := queryParam(rawQuery(req.Path), s.QueryParameters.GetQueryParameterName())
		if !ok {
			return Entry{}, false, nil
		}
		return Entry{Key: s.QueryParameters.GetDescriptorKey(), Value: v}, true, nil
	case *routev3.RateLimit_Action_RemoteAddress_:
		// RemoteAddressAction: the connection manager's downstream remote address (after
		// xff_num_trusted_hops), not the TCP peer.
		if !client.IsValid() {
			return Entry{}, false, nil
		}
		return Entry{Key: "remote_address", Value: client.String()}, true, nil
	case *routev3.RateLimit_Action_HeaderValueMatch_:
		hv := s.HeaderValueMatch
		matched, err := headersMatch(hv.GetHeaders(), req)
		if err != nil {
			return Entry{}, false, err
		}
		want := true
		if hv.GetExpectMatch() != nil {
			want = hv.GetExpectMatch().GetValue()
		}
		if matched != want {
			return Entry{}, false, nil
		}
		key := hv.GetDescriptorKey()
		if key == "" {
			key = "header_match"
		}
		return Entry{Key: key, Value: hv.GetDescriptorValue()}, true, nil
	case nil:
		return Entry{}, false, fmt.Errorf("empty action")
	default:
		return Entry{}, false, fmt.Errorf("action %T is not modelled", s)
	}
}

// queryParam is the first value of the query parameter name in query, as Envoy's
// QueryParamsMulti::parseAndDecodeQueryString reads it (e2e/envoy's TestQueryParameterParsing
// runs the cases through Envoy): parameters are split on '&' only (a ';' is part of a value),
// key and value on the first '=' (a parameter without one has the value ""), both
// percent-decoded where an escape is valid and left as written where it is not; '+' stays '+'.
func queryParam(query, name string) (string, bool) {
	for query != "" {
		var param string
		param, query, _ = strings.Cut(query, "&")
		if param == "" {
			continue
		}
		k, v, _ := strings.Cut(param, "=")
		if percentDecode(k) == name {
			return percentDecode(v), true
		}
	}
	return "", false
}

// percentDecode is Envoy's PercentEncoding::decode: each %XX with two hex digits becomes its
// byte, anything else is kept.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && hexDigit(s[i+1]) && hexDigit(s[i+2]) {
			b = append(b, unhexByte(s[i+1])<<4|unhexByte(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func rawQuery(path string) string {
	_, q, _ := strings.Cut(path, "?")
	q, _, _ = strings.Cut(q, "#")
	return q
}

// headersMatch reports whether every matcher matches req, as Envoy's HeaderMatcher does; the
// values of a repeated header are joined with commas.
func headersMatch(ms []*routev3.HeaderMatcher, req Request) (bool, error) {
	for _, m := range ms {
		ok, err := headerMatch(m, req)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func headerMatch(m *routev3.HeaderMatcher, req Request) (bool, error) {
	vals := req.header(strings.ToLower(m.GetName()))
	present := len(vals) > 0
	value := strings.Join(vals, ",")
	if !present && m.GetTreatMissingHeaderAsEmpty() {
		present = true
	}
	var ok bool
	switch s := m.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		ok = present == s.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		if !present {
			return false, nil // a missing header never matches, inverted or not
		}
		var err error
		ok, err = stringMatch(s.StringMatch, value)
		if err != nil {
			return false, err
		}
	case nil:
		ok = present
	default:
		return false, fmt.Errorf("header matcher %T is not modelled", s)
	}
	return ok != m.GetInvertMatch(), nil
}

func stringMatch(m *matcherv3.StringMatcher, v string) (bool, error) {
	fold := m.GetIgnoreCase()
	cmp := func(pattern string) (string, string) {
		if fold {
			return strings.ToLower(v), strings.ToLower(pattern)
		}
		return v, pattern
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		a, b := cmp(p.Exact)
		return a == b, nil
	case *matcherv3.StringMatcher_Prefix:
		a, b := cmp(p.Prefix)
		return strings.HasPrefix(a, b), nil
	case *matcherv3.StringMatcher_Suffix:
		a, b := cmp(p.Suffix)
		return strings.HasSuffix(a, b), nil
	case *matcherv3.StringMatcher_Contains:
		a, b := cmp(p.Contains)
		return strings.Contains(a, b), nil
	case *matcherv3.StringMatcher_SafeRegex:
		// Envoy's RE2 and Go's regexp share their syntax; the regex must match all of v.
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return false, fmt.Errorf("safe_regex %q: %w", p.SafeRegex.GetRegex(), err)
		}
		return re.MatchString(v), nil
	default:
		return false, fmt.Errorf("string matcher %T is not modelled", p)
	}
}
