package envoysim

import (
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Filters returns the ext_authz and ratelimit filters of the first connection manager (nil
// when absent).
func (c *Config) Filters() (*extauthzv3.ExtAuthz, *ratelimitv3.RateLimit, error) {
	var authz *extauthzv3.ExtAuthz
	var rl *ratelimitv3.RateLimit
	if len(c.Managers) == 0 {
		return nil, nil, errors.New("no HTTP connection manager")
	}
	for _, f := range c.Managers[0].GetHttpFilters() {
		m, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return nil, nil, err
		}
		switch v := m.(type) {
		case *extauthzv3.ExtAuthz:
			authz = v
		case *ratelimitv3.RateLimit:
			rl = v
		}
	}
	return authz, rl, nil
}

// Descriptors derives the descriptors the ratelimit filter sends for s (see Descriptors),
// with the connection manager's downstream remote address for remote_address actions. The
// RateLimitPerRoute is the most specific one, as Envoy resolves it: the route's, else its
// virtual host's (e2e/envoy's TestPerRouteMostSpecificFirst). None are sent with
// filter_enabled at 0%. It refuses rate limits the ratelimit filter could take from elsewhere,
// which it does not model: the filter's own rate_limits, the virtual host's and the route
// action's rate_limits.
func (c *Config) Descriptors(s *Stream) ([]Descriptor, error) {
	if s.Route == nil {
		return nil, nil
	}
	_, rl, err := c.Filters()
	if err != nil {
		return nil, err
	}
	if enabled, err := fullOrNone("filter_enabled", rl.GetFilterEnabled()); err != nil || !enabled {
		return nil, err
	}
	if len(rl.GetRateLimits()) > 0 {
		return nil, errors.New("ratelimit filter: rate_limits at filter level are not modelled")
	}
	if len(s.VirtualHost.GetRateLimits()) > 0 {
		return nil, fmt.Errorf("virtual host %q: rate_limits are not modelled", s.VirtualHost.GetName())
	}
	if len(s.Route.GetRoute().GetRateLimits()) > 0 {
		return nil, fmt.Errorf("route %q: route.rate_limits (the router's rate limit policy) are not modelled", s.Route.GetName())
	}
	if _, ok := s.Route.GetTypedPerFilterConfig()[RateLimitFilter]; !ok {
		if a, ok := s.VirtualHost.GetTypedPerFilterConfig()[RateLimitFilter]; ok {
			// The virtual host's, read as if the route carried it.
			r := &routev3.Route{Name: s.Route.GetName(), TypedPerFilterConfig: map[string]*anypb.Any{RateLimitFilter: a}}
			return deriveDescriptors(r, s.Request, s.Client)
		}
	}
	return deriveDescriptors(s.Route, s.Request, s.Client)
}

// CheckRequest builds the CheckRequest the ext_authz filter sends for s at now, as
// CheckRequestUtils::createHttpCheck does: id is the stream id, protocol the downstream one,
// headers the stream's (repeated ones joined with ",", values made valid UTF-8 with '!' as
// MessageUtil::sanitizeUtf8String does; or header_map with raw values under
// encode_raw_headers), only those allowed_headers lets through and disallowed_headers does not
// stop, the source the TCP peer, and the context_extensions of the virtual host overlaid with
// the route's. It returns nil, nil when the route disables ext_authz, and when no route
// matched: Envoy's ext_authz filter sends no Check for a request the router will answer 404
// (e2e/envoy's TestUnroutedPathGetsNoCheck).
func (c *Config) CheckRequest(s *Stream, now time.Time) (*authv3.CheckRequest, error) {
	if s.Route == nil {
		return nil, nil
	}
	f, _, err := c.Filters()
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, errors.New("no ext_authz filter")
	}
	if err := modelledExtAuthz(f); err != nil {
		return nil, err
	}
	ext := map[string]string{}
	for _, p := range []routeOrHost{hostConfig{s.VirtualHost}, routeConfig{s.Route}} {
		var per extauthzv3.ExtAuthzPerRoute
		ok, err := p.unpack(ExtAuthzFilter, &per)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if per.GetDisabled() {
			return nil, nil
		}
		cs := per.GetCheckSettings()
		if cs.GetWithRequestBody() != nil || cs.GetServiceOverride() != nil {
			return nil, fmt.Errorf("%s: ExtAuthzPerRoute.check_settings: with_request_body and service overrides are not modelled", p.name())
		}
		// FilterConfigPerRoute merges from the least to the most specific: the route wins.
		maps.Copy(ext, cs.GetContextExtensions())
	}
	if len(ext) == 0 {
		ext = nil
	}
	r := s.Request
	http := &authv3.AttributeContext_HttpRequest{
		Id:       strconv.FormatUint(s.ID, 10),
		Method:   r.Method,
		Path:     r.Path,
		Host:     r.Host,
		Scheme:   r.Scheme,
		Protocol: r.Protocol,
	}
	// Envoy's header map holds the pseudo-headers first, then the others in arrival order; a
	// Go map has no order, so the others come sorted by name.
	names := []string{":authority", ":path", ":method", ":scheme"}
	var rest []string
	for k := range r.Headers {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	names = append(names, rest...)
	allowed, err := keyMatcher(f.GetAllowedHeaders())
	if err != nil {
		return nil, err
	}
	disallowed, err := keyMatcher(f.GetDisallowedHeaders())
	if err != nil {
		return nil, err
	}
	for _, k := range names {
		if (allowed != nil && !allowed(k)) || (disallowed != nil && disallowed(k)) {
			continue
		}
		for _, v := range r.header(k) {
			if f.GetEncodeRawHeaders() {
				if http.HeaderMap == nil {
					http.HeaderMap = &corev3.HeaderMap{}
				}
				http.HeaderMap.Headers = append(http.HeaderMap.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
				continue
			}
			if http.Headers == nil {
				http.Headers = map[string]string{}
			}
			if old, ok := http.Headers[k]; ok {
				http.Headers[k] = old + "," + sanitizeUTF8(v)
			} else {
				http.Headers[k] = sanitizeUTF8(v)
			}
		}
	}
	// CheckRequestUtils::setAttrContextPeer: the connection's remote address, never the
	// x-forwarded-for client; the principal from the peer certificate.
	// The destination is Envoy's end of the connection; the metadata contexts are sent empty.
	source := &authv3.AttributeContext_Peer{Address: socketAddress(r.Remote), Principal: r.Principal}
	if f.GetIncludePeerCertificate() && len(r.PeerCertificate) > 0 {
		source.Certificate = urlEncodedPEM(r.PeerCertificate)
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:               source,
		Destination:          destination(r),
		Request:              &authv3.AttributeContext_Request{Time: timestamppb.New(now), Http: http},
		ContextExtensions:    ext,
		MetadataContext:      &corev3.Metadata{},
		RouteMetadataContext: &corev3.Metadata{},
	}}, nil
}

// modelledExtAuthz refuses ext_authz settings that change the CheckRequest in a way
// CheckRequest does not model.
func modelledExtAuthz(f *extauthzv3.ExtAuthz) error {
	var bad []string
	if f.GetWithRequestBody() != nil {
		bad = append(bad, "with_request_body")
	}
	if f.GetHttpService() != nil {
		bad = append(bad, "http_service")
	}
	if f.GetIncludeTlsSession() {
		bad = append(bad, "include_tls_session")
	}
	if len(f.GetMetadataContextNamespaces()) > 0 || len(f.GetTypedMetadataContextNamespaces()) > 0 ||
		len(f.GetRouteMetadataContextNamespaces()) > 0 || len(f.GetRouteTypedMetadataContextNamespaces()) > 0 {
		bad = append(bad, "metadata context namespaces")
	}
	if f.GetBootstrapMetadataLabelsKey() != "" {
		bad = append(bad, "bootstrap_metadata_labels_key")
	}
	if len(bad) > 0 {
		return fmt.Errorf("ext_authz: not modelled: %s", strings.Join(bad, ", "))
	}
	return nil
}

// routeOrHost is a virtual host or a route, for their typed_per_filter_config.
type routeOrHost interface {
	unpack(filter string, m proto.Message) (bool, error)
	name() string
}

type hostConfig struct{ vh *routev3.VirtualHost }

func (h hostConfig) unpack(filter string, m proto.Message) (bool, error) {
	a, ok := h.vh.GetTypedPerFilterConfig()[filter]
	if !ok {
		return false, nil
	}
	if err := a.UnmarshalTo(m); err != nil {
		return false, fmt.Errorf("%s: typed_per_filter_config[%q]: %w", h.name(), filter, err)
	}
	return true, nil
}

func (h hostConfig) name() string { return fmt.Sprintf("virtual host %q", h.vh.GetName()) }

type routeConfig struct{ r *routev3.Route }

func (r routeConfig) unpack(filter string, m proto.Message) (bool, error) {
	if r.r == nil {
		return false, nil
	}
	return unpack(r.r, filter, m)
}

func (r routeConfig) name() string { return fmt.Sprintf("route %q", r.r.GetName()) }

// keyMatcher compiles a ListStringMatcher over header names; nil when l is nil.
func keyMatcher(l *matcherv3.ListStringMatcher) (func(string) bool, error) {
	if l == nil {
		return nil, nil
	}
	for _, p := range l.GetPatterns() {
		if _, err := stringMatch(p, ""); err != nil {
			return nil, err
		}
	}
	return func(k string) bool {
		for _, p := range l.GetPatterns() {
			if ok, _ := stringMatch(p, k); ok {
				return true
			}
		}
		return false
	}, nil
}

// urlEncodedPEM is the peer certificate as include_peer_certificate sends it: PEM (64-column
// lines), every byte but the unreserved ones percent-encoded, in upper-case hex.
func urlEncodedPEM(certPEM []byte) string {
	block, _ := pem.Decode(certPEM) // the leaf only
	if block == nil {
		return ""
	}
	var b strings.Builder
	const hex = "0123456789ABCDEF"
	for _, c := range pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: block.Bytes}) {
		if isUnreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}
