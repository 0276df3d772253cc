package envoysim

import (
	"fmt"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Match returns the first route of the config whose match accepts req (virtual hosts by exact
// domain, the port included as Envoy matches it, first, then "*"), or nil. Path, prefix, path_separated_prefix and safe_regex paths and
// header matchers are modelled; a route using another matcher is an error.
func (c *Config) Match(req Request) (*routev3.Route, error) {
	_, r, err := c.match(req)
	return r, err
}

// match returns the virtual host and the route Match selects.
func (c *Config) match(req Request) (*routev3.VirtualHost, *routev3.Route, error) {
	for _, m := range c.Managers {
		// The host is matched with its port, unless ignore_port_in_host_matching.
		host := strings.ToLower(req.Host)
		if m.GetRouteConfig().GetIgnorePortInHostMatching() {
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
		}
		vhs := m.GetRouteConfig().GetVirtualHosts()
		for _, vh := range vhs {
			for _, d := range vh.GetDomains() {
				if d != "*" && strings.Contains(d, "*") {
					return nil, nil, fmt.Errorf("virtual host %q: wildcard domain %q is not modelled", vh.GetName(), d)
				}
			}
		}
		var chosen *routev3.VirtualHost
		for _, vh := range vhs {
			for _, d := range vh.GetDomains() {
				if strings.ToLower(d) == host && chosen == nil {
					chosen = vh
				}
			}
		}
		for _, vh := range vhs {
			for _, d := range vh.GetDomains() {
				if d == "*" && chosen == nil {
					chosen = vh
				}
			}
		}
		for _, r := range chosen.GetRoutes() {
			ok, err := routeMatch(r.GetMatch(), req)
			if err != nil {
				return nil, nil, fmt.Errorf("route %q: %w", r.GetName(), err)
			}
			if ok {
				return chosen, r, nil
			}
		}
	}
	return nil, nil, nil
}

func routeMatch(m *routev3.RouteMatch, req Request) (bool, error) {
	if len(m.GetQueryParameters()) > 0 || len(m.GetCookies()) > 0 || m.GetGrpc() != nil ||
		m.GetTlsContext() != nil || len(m.GetDynamicMetadata()) > 0 || len(m.GetFilterState()) > 0 ||
		m.GetRuntimeFraction() != nil {
		return false, fmt.Errorf("match options beyond path and headers are not modelled")
	}
	path := req.pathOnly()
	fold := m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue()
	if fold {
		path = strings.ToLower(path)
	}
	lower := func(s string) string {
		if fold {
			return strings.ToLower(s)
		}
		return s
	}
	var ok bool
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		ok = strings.HasPrefix(path, lower(p.Prefix))
	case *routev3.RouteMatch_Path:
		ok = path == lower(p.Path)
	case *routev3.RouteMatch_PathSeparatedPrefix:
		pre := lower(p.PathSeparatedPrefix)
		ok = path == pre || strings.HasPrefix(path, pre+"/")
	case *routev3.RouteMatch_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return false, err
		}
		ok = re.MatchString(req.pathOnly())
	default:
		return false, fmt.Errorf("path matcher %T is not modelled", p)
	}
	if !ok {
		return false, nil
	}
	return headersMatch(m.GetHeaders(), req)
}

// ContextExtensions returns the context_extensions route sets for ext_authz, or nil.
func ContextExtensions(route *routev3.Route) (map[string]string, error) {
	var per extauthzv3.ExtAuthzPerRoute
	ok, err := unpack(route, ExtAuthzFilter, &per)
	if err != nil || !ok {
		return nil, err
	}
	return per.GetCheckSettings().GetContextExtensions(), nil
}

// CheckRequest builds the ext_authz CheckRequest an ext_authz filter without allowed_headers
// sends for req as the filters see it (after Config.Accept; route may be nil), as Envoy 1.40
// sends it: a random stream id, lower-case headers with the pseudo-headers, repeated headers
// joined by commas, the path with its query, the source address and principal, the
// destination (req.Local), the route's context_extensions and empty metadata contexts.
func CheckRequest(route *routev3.Route, req Request, now time.Time) (*authv3.CheckRequest, error) {
	var ext map[string]string
	if route != nil {
		var err error
		if ext, err = ContextExtensions(route); err != nil {
			return nil, err
		}
	}
	scheme := req.Scheme
	if scheme == "" {
		scheme = "http"
	}
	headers := map[string]string{
		":method":    req.Method,
		":path":      req.Path,
		":authority": req.Host,
		":scheme":    scheme,
	}
	names := make([]string, 0, len(req.Headers))
	for k := range req.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		headers[strings.ToLower(k)] = strings.Join(req.Headers[k], ",")
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: socketAddress(req.Remote), Principal: req.Principal},
		Destination: destination(req),
		Request: &authv3.AttributeContext_Request{
			Time: timestamppb.New(now),
			Http: &authv3.AttributeContext_HttpRequest{
				Id:       strconv.FormatUint(streamID(), 10),
				Method:   req.Method,
				Headers:  headers,
				Path:     req.Path,
				Host:     req.Host,
				Scheme:   scheme,
				Protocol: protocol(req),
			},
		},
		ContextExtensions:    ext,
		MetadataContext:      &corev3.Metadata{},
		RouteMetadataContext: &corev3.Metadata{},
	}}, nil
}

// destination is the CheckRequest's destination: Envoy's end of the connection, when known.
func destination(req Request) *authv3.AttributeContext_Peer {
	if !req.Local.IsValid() {
		return nil
	}
	return &authv3.AttributeContext_Peer{Address: socketAddress(req.Local), Principal: req.LocalPrincipal}
}

// protocol is the downstream protocol, HTTP/1.1 when unset.
func protocol(req Request) string {
	if req.Protocol == "" {
		return "HTTP/1.1"
	}
	return req.Protocol
}
