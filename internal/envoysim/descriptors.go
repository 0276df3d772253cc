package envoysim

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Filter names the shipped configs use as typed_per_filter_config keys.
const (
	RateLimitFilter = "envoy.filters.http.ratelimit"
	ExtAuthzFilter  = "envoy.filters.http.ext_authz"
)

// Request is an HTTP request as Envoy sees it when it runs its filters.
type Request struct {
	Method string
	Path   string // with the query string, as in :path
	Host   string // :authority
	Scheme string // "" means http
	// Headers holds the request headers by lower-case name; a name may repeat.
	Headers map[string][]string
	// Remote is the downstream client address Envoy trusts (the peer, or the x-forwarded-for
	// hop its xff_num_trusted_hops selects).
	Remote netip.AddrPort
	// Principal is the peer certificate's identity on an mTLS listener, else "".
	Principal string
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
			return []string{"http"}
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
	// HitsAddend is the descriptor's own hits (0: not set, the request's count applies).
	HitsAddend     uint64
	IsNegativeHits bool
	// OnStreamDone marks a descriptor sent when the stream ends rather than on the request.
	OnStreamDone bool
}

// Proto returns the descriptor as the rate-limit service receives it.
func (d Descriptor) Proto() *ratelimitcommonv3.RateLimitDescriptor {
	p := &ratelimitcommonv3.RateLimitDescriptor{IsNegativeHits: d.IsNegativeHits}
	for _, e := range d.Entries {
		p.Entries = append(p.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	if d.HitsAddend != 0 {
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
// path and at stream end (OnStreamDone), in config order. As in Envoy, an action that yields no
// entry drops its whole descriptor unless it is skip_if_absent, and a descriptor left without
// entries is not sent. It returns an error for an action or option this derivation does not
// model (so a config using one is never checked against a wrong guess).
func Descriptors(route *routev3.Route, req Request) ([]Descriptor, error) {
	var per ratelimitv3.RateLimitPerRoute
	ok, err := unpack(route, RateLimitFilter, &per)
	if err != nil || !ok {
		return nil, err
	}
	var out []Descriptor
	for i, rl := range per.GetRateLimits() {
		d, ok, err := descriptor(rl, req)
		if err != nil {
			return nil, fmt.Errorf("route %q: rate_limits[%d]: %w", route.GetName(), i, err)
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

func descriptor(rl *routev3.RateLimit, req Request) (Descriptor, bool, error) {
	if rl.GetLimit() != nil {
		return Descriptor{}, false, fmt.Errorf("limit overrides are not modelled")
	}
	d := Descriptor{OnStreamDone: rl.GetApplyOnStreamDone()}
	if h := rl.GetHitsAddend(); h != nil {
		if h.GetFormat() != "" {
			return Descriptor{}, false, fmt.Errorf("hits_addend.format is not modelled")
		}
		d.HitsAddend = h.GetNumber().GetValue()
		d.IsNegativeHits = h.GetIsNegativeHits()
	}
	complete := true
	for j, a := range rl.GetActions() {
		e, ok, err := action(a, req)
		if err != nil {
			return Descriptor{}, false, fmt.Errorf("actions[%d]: %w", j, err)
		}
		switch {
		case ok:
			d.Entries = append(d.Entries, e)
		case !skipIfAbsent(a):
			complete = false
		}
	}
	return d, complete && len(d.Entries) > 0, nil
}

func skipIfAbsent(a *routev3.RateLimit_Action) bool {
	switch s := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_RequestHeaders_:
		return s.RequestHeaders.GetSkipIfAbsent()
	case *routev3.RateLimit_Action_QueryParameters_:
		return s.QueryParameters.GetSkipIfAbsent()
	}
	return false
}

// action returns the entry one action appends, or false when it appends none.
func action(a *routev3.RateLimit_Action, req Request) (Entry, bool, error) {
	switch s := a.GetActionSpecifier().(type) {
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
		q, err := url.ParseQuery(rawQuery(req.Path))
		if err != nil {
			return Entry{}, false, nil
		}
		v, ok := q[s.QueryParameters.GetQueryParameterName()]
		if !ok || len(v) == 0 {
			return Entry{}, false, nil
		}
		return Entry{Key: s.QueryParameters.GetDescriptorKey(), Value: v[0]}, true, nil
	case *routev3.RateLimit_Action_RemoteAddress_:
		if !req.Remote.Addr().IsValid() {
			return Entry{}, false, nil
		}
		return Entry{Key: "remote_address", Value: req.Remote.Addr().Unmap().String()}, true, nil
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
