package envoysim

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// LocalReply is a request the connection manager answers itself before any filter runs (a
// path it refuses: 400).
type LocalReply struct {
	Code   int
	Reason string
}

func (e *LocalReply) Error() string { return fmt.Sprintf("envoy answers %d: %s", e.Code, e.Reason) }

// Stream is one request after Envoy's HTTP connection manager has prepared it: what every
// HTTP filter, and so the ext_authz and rate-limit calls, see.
type Stream struct {
	// Request is the request as the filters see it: path normalised, x-forwarded-for with the
	// peer appended, x-forwarded-proto, x-envoy-external-address and x-request-id set,
	// hop-by-hop and internal-only headers removed.
	Request Request
	// ID is the stream id (a random uint64 in Envoy), sent as CheckRequest attributes.request.
	// http.id.
	ID uint64
	// Client is the downstream remote address the connection manager settled on: the
	// x-forwarded-for entry xff_num_trusted_hops selects, else the peer. Rate-limit
	// remote_address actions use it; the CheckRequest source is the peer (Request.Remote).
	Client netip.Addr
	// Edge reports an external request (use_remote_address and not internal).
	Edge bool
	// VirtualHost and Route are what the route table selected for Request (nil when none).
	VirtualHost *routev3.VirtualHost
	Route       *routev3.Route
}

// Accept runs req through the first HTTP connection manager as Envoy's
// ConnectionManagerImpl::ActiveStream::decodeHeaders does before the filter chain: it
// normalises the path (ConnectionManagerUtility::maybeNormalizePath), mutates the headers
// (ConnectionManagerUtility::mutateRequestHeaders) and selects the route. It returns a
// *LocalReply for a request Envoy answers itself, and an error for a connection manager setting
// it does not model, so that a config using one is never checked against a wrong guess.
func (c *Config) Accept(req Request) (*Stream, error) {
	if len(c.Managers) == 0 {
		return nil, errors.New("no HTTP connection manager")
	}
	m := c.Managers[0]
	if err := modelledManager(m); err != nil {
		return nil, err
	}
	r := req.clone()
	if r.Protocol == "" {
		r.Protocol = "HTTP/1.1"
	}
	if r.Protocol == "HTTP/1.0" && !m.GetHttpProtocolOptions().GetAcceptHttp_10() {
		// The HTTP/1 codec (ServerConnectionImpl::checkProtocolVersion) answers
		// HTTP/1.0 with 426 Upgrade Required unless http_protocol_options.accept_http_10.
		return nil, &LocalReply{Code: 426, Reason: "HTTP/1.0 without accept_http_10"}
	}
	if err := normalizePath(m, &r); err != nil {
		return nil, err
	}
	s := &Stream{ID: streamID()}
	if err := c.mutateHeaders(m, &r, s); err != nil {
		return nil, err
	}
	s.Request = r
	vh, route, err := c.match(r)
	if err != nil {
		return nil, err
	}
	s.VirtualHost, s.Route = vh, route
	return s, nil
}

// modelledManager refuses connection manager settings that change what the filters see in a
// way Accept does not model.
func modelledManager(m *hcmv3.HttpConnectionManager) error {
	var bad []string
	if !m.GetUseRemoteAddress().GetValue() {
		bad = append(bad, "use_remote_address false (original IP detection)")
	}
	if len(m.GetOriginalIpDetectionExtensions()) > 0 {
		bad = append(bad, "original_ip_detection_extensions")
	}
	if m.GetVia() != "" {
		bad = append(bad, "via")
	}
	if m.GetSchemeHeaderTransformation() != nil {
		bad = append(bad, "scheme_header_transformation")
	}
	if m.GetStripPortMode() != nil || m.GetStripMatchingHostPort() || m.GetStripTrailingHostDot() {
		bad = append(bad, "strip_matching_host_port / strip_any_host_port / strip_trailing_host_dot")
	}
	if len(m.GetEarlyHeaderMutationExtensions()) > 0 {
		bad = append(bad, "early_header_mutation_extensions")
	}
	if m.GetForwardClientCertDetails() != hcmv3.HttpConnectionManager_SANITIZE {
		bad = append(bad, "forward_client_cert_details "+m.GetForwardClientCertDetails().String())
	}
	if m.GetForwardProtoConfig() != nil {
		bad = append(bad, "forward_proto_config")
	}
	if m.GetRouteConfig() == nil {
		bad = append(bad, "a route table other than an inline route_config")
	}
	if m.GetPathNormalizationOptions() != nil {
		bad = append(bad, "path_normalization_options")
	}
	if m.GetRequestIdExtension() != nil {
		bad = append(bad, "request_id_extension")
	}
	if m.GetAddUserAgent().GetValue() {
		bad = append(bad, "add_user_agent")
	}
	if m.GetAppendXForwardedPort() {
		bad = append(bad, "append_x_forwarded_port")
	}
	if len(m.GetInternalAddressConfig().GetCidrRanges()) > 0 || m.GetInternalAddressConfig().GetUnixSockets() {
		bad = append(bad, "internal_address_config")
	}
	switch m.GetPathWithEscapedSlashesAction() {
	case hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT, hcmv3.HttpConnectionManager_KEEP_UNCHANGED,
		hcmv3.HttpConnectionManager_REJECT_REQUEST, hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD:
	default:
		bad = append(bad, "path_with_escaped_slashes_action "+m.GetPathWithEscapedSlashesAction().String())
	}
	if len(bad) > 0 {
		return fmt.Errorf("http connection manager: not modelled: %s", strings.Join(bad, ", "))
	}
	return nil
}

// normalizePath applies path_with_escaped_slashes_action, normalize_path and merge_slashes to
// the path (not the query), in ConnectionManagerUtility::maybeNormalizePath's order. As Envoy
// 1.40 answers, a path with a '#' anywhere (query included) or one that does not start with a
// slash is refused with 400 first; an absolute-form request target is not modelled.
func normalizePath(m *hcmv3.HttpConnectionManager, r *Request) error {
	switch {
	case strings.HasPrefix(r.Path, "http://") || strings.HasPrefix(r.Path, "https://"):
		return errors.New("an absolute-form request target: not modelled")
	case !strings.HasPrefix(r.Path, "/"):
		return &LocalReply{Code: 400, Reason: "a path that does not start with a slash"}
	case strings.Contains(r.Path, "#"):
		return &LocalReply{Code: 400, Reason: "a fragment in the path"}
	}
	path, query, hasQuery := strings.Cut(r.Path, "?")
	switch m.GetPathWithEscapedSlashesAction() {
	case hcmv3.HttpConnectionManager_REJECT_REQUEST:
		// ConnectionManagerUtility::maybeUnescapeOrRejectEscapedSlashes.
		l := strings.ToLower(path)
		if strings.Contains(l, "%2f") || strings.Contains(l, "%5c") {
			return &LocalReply{Code: 400, Reason: "path with an escaped slash (path_with_escaped_slashes_action: REJECT_REQUEST)"}
		}
	case hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD:
		path = unescapeSlashes(path)
	}
	if m.GetNormalizePath().GetValue() {
		var ok bool
		if path, ok = canonicalPath(path); !ok {
			return &LocalReply{Code: 400, Reason: "path that does not normalise (PathUtil::canonicalPath)"}
		}
	}
	if m.GetMergeSlashes() {
		path = mergeSlashes(path)
	}
	r.Path = path
	if hasQuery {
		r.Path += "?" + query
	}
	return nil
}

// unescapeSlashes decodes %2F and %5C (either case), as PathTransformer::unescapeSlashes.
func unescapeSlashes(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) {
			switch strings.ToLower(p[i+1 : i+3]) {
			case "2f":
				b.WriteByte('/')
				i += 2
				continue
			case "5c":
				b.WriteByte('\\')
				i += 2
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// canonicalPath is PathUtil::canonicalPath (Chromium's CanonicalizePath as vendored by Envoy) on
// a path starting with a slash: a backslash is a slash, a percent-encoded unreserved character
// is decoded, other escapes stay as written (their case too), dot segments are removed. An
// encoded NUL makes the path invalid (400). Its cases come from Envoy's
// test/common/http/path_utility_test.cc.
func canonicalPath(p string) (string, bool) {
	var b []byte
	if !strings.HasPrefix(p, "/") {
		return "", false // Accept refuses such a path first, as Envoy does
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			b = append(b, '/')
		case c == '%' && i+2 < len(p) && hexDigit(p[i+1]) && hexDigit(p[i+2]):
			d := unhexByte(p[i+1])<<4 | unhexByte(p[i+2])
			if d == 0 {
				return "", false
			}
			if isUnreserved(d) {
				b = append(b, d)
			} else {
				b = append(b, p[i:i+3]...)
			}
			i += 2
		default:
			b = append(b, c)
		}
	}
	segs := strings.Split(string(b[1:]), "/")
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
	return "/" + strings.Join(out, "/"), true
}

// mergeSlashes is PathUtil::mergeSlashes on a path without its query.
func mergeSlashes(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func hexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhexByte(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// Headers the connection manager removes from every request
// (ConnectionManagerUtility::mutateRequestHeaders), and from every request that is not internal
// (cleanInternalHeaders), and from edge requests only.
var (
	hopByHop = []string{"connection", "upgrade", "keep-alive", "proxy-connection", "transfer-encoding",
		"x-envoy-internal"}
	internalOnly = []string{"x-envoy-retriable-status-codes", "x-envoy-retriable-header-names",
		"x-envoy-retry-on", "x-envoy-retry-grpc-on", "x-envoy-max-retries", "x-envoy-upstream-alt-stat-name",
		"x-envoy-upstream-rq-timeout-ms", "x-envoy-upstream-rq-per-try-timeout-ms",
		"x-envoy-upstream-rq-timeout-alt-response", "x-envoy-expected-rq-timeout-ms",
		"x-envoy-force-trace", "x-envoy-ip-tags", "x-envoy-original-url", "x-envoy-hedge-on-per-try-timeout",
		"x-envoy-original-path"}
	edgeOnly = []string{"x-envoy-decorator-operation", "x-envoy-downstream-service-cluster",
		"x-envoy-downstream-service-node"}
)

// mutateHeaders is ConnectionManagerUtility::mutateRequestHeaders with use_remote_address true.
func (c *Config) mutateHeaders(m *hcmv3.HttpConnectionManager, r *Request, s *Stream) error {
	asReceived := r.clone()
	if !r.Remote.IsValid() {
		return errors.New("request without a peer address (Request.Remote)")
	}
	// The peer as Envoy reports it: an IPv4-mapped IPv6 address (one a PROXY protocol header
	// gives) stays one.
	peer := r.Remote.Addr()
	if peer.IsLoopback() && !m.GetSkipXffAppend() {
		return errors.New("a loopback peer: Envoy appends its own address to x-forwarded-for, not modelled")
	}
	for _, h := range hopByHop {
		delete(r.Headers, h)
	}
	// forward_client_cert_details SANITIZE (the default, the only one modelled): a client's
	// x-forwarded-client-cert never reaches the filters.
	delete(r.Headers, "x-forwarded-client-cert")
	if len(r.Headers["cookie"]) > 1 && r.Protocol == "HTTP/2" {
		// The HTTP/2 codec puts cookie crumbs back together into one header, joined with
		// "; ". Over HTTP/1 each cookie header stays an entry of its own.
		r.Headers["cookie"] = []string{strings.Join(r.Headers["cookie"], "; ")}
	}
	if len(r.Headers["cookie"]) > 1 && r.Protocol == "HTTP/3" {
		return errors.New("several cookie headers over HTTP/3: not modelled")
	}
	// A repeated x-forwarded-for is one header to Envoy, joined with commas.
	xff, hadXFF := r.Headers["x-forwarded-for"]
	received := strings.Join(xff, ",")
	hops := m.GetXffNumTrustedHops()
	var client netip.Addr
	if hops > 0 && hadXFF {
		client = lastAddressFromXFF(received, int(hops)-1)
	}
	if !client.IsValid() {
		client = peer
	}
	if !m.GetSkipXffAppend() {
		// Utility::appendXff: the peer, after a comma when there is a header already.
		if hadXFF && received != "" {
			received += "," + peer.String()
		} else {
			received = peer.String()
		}
		r.Headers["x-forwarded-for"] = []string{received}
	}
	if hops == 0 || len(r.Headers["x-forwarded-proto"]) == 0 {
		r.Headers["x-forwarded-proto"] = []string{r.scheme()}
	}
	if r.Scheme == "" {
		r.Scheme = r.Headers["x-forwarded-proto"][0]
		if r.Scheme != "http" && r.Scheme != "https" {
			r.Scheme = r.scheme()
		}
	}
	// Internal requests: with no internal_address_config (modelledManager refuses one), Envoy
	// 1.40 counts no address as internal, private and loopback peers included, so every
	// request is an edge request.
	s.Client, s.Edge = client, true
	for _, h := range internalOnly {
		delete(r.Headers, h)
	}
	for _, h := range edgeOnly {
		delete(r.Headers, h)
	}
	r.Headers["x-envoy-external-address"] = []string{client.String()}
	// The request id extension: set on every edge request unless preserve_external_request_id,
	// and on any request without one.
	if m.GetGenerateRequestId() == nil || m.GetGenerateRequestId().GetValue() {
		if !m.GetPreserveExternalRequestId() || len(r.Headers["x-request-id"]) == 0 {
			r.Headers["x-request-id"] = []string{c.requestID(asReceived)}
		}
	}
	return nil
}

// lastAddressFromXFF is Utility::getLastAddressFromXFF: skip skip entries from the right, take
// the next one, trimmed; the zero Addr when there are too few entries or it is no IP address.
// An IPv6 address may carry a zone: an interface name becomes the interface's index, as
// Envoy's numeric getaddrinfo makes it (an unknown interface is no address).
func lastAddressFromXFF(xff string, skip int) netip.Addr {
	for i := 0; i < skip; i++ {
		j := strings.LastIndexByte(xff, ',')
		if j < 0 {
			return netip.Addr{}
		}
		xff = xff[:j]
	}
	if j := strings.LastIndexByte(xff, ','); j >= 0 && j+1 < len(xff) {
		xff = xff[j+1:]
	}
	a, err := netip.ParseAddr(strings.TrimSpace(xff))
	if err != nil {
		return netip.Addr{}
	}
	if z := a.Zone(); z != "" {
		if _, err := strconv.ParseUint(z, 10, 32); err != nil {
			ifc, err := net.InterfaceByName(z)
			if err != nil {
				return netip.Addr{}
			}
			a = a.WithZone(strconv.Itoa(ifc.Index))
		}
	}
	return a
}

// streamID is a random uint64, as Envoy's stream ids are.
func streamID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return binary.BigEndian.Uint64(b[:])
}

// requestID is the id the request id extension generates for req (as received): RequestID's
// when set, else a random version-4 UUID as Envoy's UUIDRequestIDExtension makes.
func (c *Config) requestID(req Request) string {
	if c.RequestID != nil {
		return c.RequestID(req)
	}
	return UUID()
}

// UUID is a random version-4 UUID in Envoy's x-request-id format.
func UUID() string {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		panic(err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i, x := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b.WriteByte('-')
		}
		b.WriteByte(hex[x>>4])
		b.WriteByte(hex[x&0xf])
	}
	return b.String()
}

// sanitizeUTF8 is MessageUtil::sanitizeUtf8String: every byte that is not part of valid UTF-8
// becomes '!'. Envoy applies it to the CheckRequest's headers map values (not to header_map's
// raw values, nor to rate-limit descriptors).
func sanitizeUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, '!')
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}

// socketAddress is a as an Envoy core address (nil when a is not valid).
func socketAddress(a netip.AddrPort) *corev3.Address {
	if !a.IsValid() {
		return nil
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       a.Addr().String(),
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(a.Port())},
	}}}
}
