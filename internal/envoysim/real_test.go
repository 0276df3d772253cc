package envoysim

// The harness that runs this package's cases through a real Envoy: a bootstrap derived from
// envoy.yaml (the same document is loaded into the emulation), a recording gRPC service for
// its ext_authz and rate-limit calls that answers as a case says, the recording upstream, and
// a client that tells Envoy which peer it is (the PROXY protocol), so that a case's
// Request.Remote and Request.Local are what Envoy sees. Under -short these tests skip.

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	proxyprotocolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/proxy_protocol/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// real is a running Envoy on a variant of envoy.yaml, and the emulation of the same document,
// at one of its listeners.
type real struct {
	t        *testing.T
	envoy    *envoytest.Proc
	rec      *envoytest.Service // the ext_authz and rate-limit service; the fence request always gets OK
	up       *envoytest.Upstream
	listener string // the listener requests go to
	// clientTLS, when set, makes the client speak TLS (after the PROXY header).
	clientTLS *tls.Config
	conf      *Config // the emulation of that listener's connection manager
	all       *Config // the emulation of the whole variant
	names     []string
}

// at is e sending to the listener called name, with its connection manager's emulation.
func (e *real) at(name string) *real {
	e.t.Helper()
	for i, n := range e.names {
		if n == name {
			c := *e.all
			c.Managers = []*hcmv3.HttpConnectionManager{e.all.Managers[i]}
			out := *e
			out.listener, out.conf = name, &c
			return &out
		}
	}
	e.t.Fatalf("no listener %q", name)
	return nil
}

// variant is a change to the bootstrap Envoy runs (and the emulation loads).
type variant func(t *testing.T, b *bootstrapv3.Bootstrap)

// startReal runs Envoy on envoy.yaml changed by vs, every listener also reading a PROXY
// protocol header so that the client can say which peer it is. Every cluster points at the
// recorder (extauthz) or the upstream (the others).
func startReal(t *testing.T, vs ...variant) *real {
	t.Helper()
	envoytest.Binary(t)
	base, err := Load(shippedEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	b := proto.Clone(base.Bootstrap).(*bootstrapv3.Bootstrap)
	for _, v := range append([]variant{withProxyProtocol}, vs...) {
		v(t, b)
	}
	doc, err := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := Parse("variant of envoy.yaml", doc)
	if err != nil {
		t.Fatalf("the emulation refuses the variant: %v", err)
	}
	conf.RequestID = func(Request) string { return generatedID }
	e := &real{t: t, rec: envoytest.StartService(t), up: envoytest.StartUpstream(t), all: conf}
	for _, l := range b.GetStaticResources().GetListeners() {
		e.names = append(e.names, l.GetName())
	}
	if len(e.names) != len(conf.Managers) {
		t.Fatalf("%d listeners, %d connection managers", len(e.names), len(conf.Managers))
	}
	ups := map[string][]string{}
	for _, c := range b.GetStaticResources().GetClusters() {
		ups[c.GetName()] = []string{e.up.Addr}
	}
	ups["extauthz"] = []string{e.rec.Addr}
	cfg, err := envoytest.Bootstrap(doc, envoytest.Rewrite{Upstreams: ups})
	if err != nil {
		t.Fatal(err)
	}
	e.envoy = envoytest.Start(t, envoytest.Options{Config: cfg, Concurrency: 1})
	return e.at("ingress")
}

// generatedID stands for an x-request-id the connection manager generated, in the emulation's
// answers and (replacing the UUID Envoy chose) in Envoy's.
const generatedID = "<generated>"

func withProxyProtocol(t *testing.T, b *bootstrapv3.Bootstrap) {
	a, err := anypb.New(&proxyprotocolv3.ProxyProtocol{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		l.ListenerFilters = append(l.ListenerFilters, &listenerv3.ListenerFilter{
			Name: "envoy.filters.listener.proxy_protocol", ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: a}})
	}
}

// withListener adds a copy of the ingress listener called name, its connection manager changed
// by change.
func withListener(name string, change func(m *hcmv3.HttpConnectionManager)) variant {
	return func(t *testing.T, b *bootstrapv3.Bootstrap) {
		for _, l := range b.GetStaticResources().GetListeners() {
			if l.GetName() == "ingress" {
				c := proto.Clone(l).(*listenerv3.Listener)
				c.Name = name
				b.StaticResources.Listeners = append(b.StaticResources.Listeners, c)
				withHCM(name, change)(t, b)
				return
			}
		}
		t.Fatal("no ingress listener")
	}
}

// withHCM changes the connection manager of the listener called name.
func withHCM(name string, change func(m *hcmv3.HttpConnectionManager)) variant {
	return func(t *testing.T, b *bootstrapv3.Bootstrap) {
		for _, l := range b.GetStaticResources().GetListeners() {
			if l.GetName() != name {
				continue
			}
			for _, fc := range l.GetFilterChains() {
				for _, f := range fc.GetFilters() {
					var m hcmv3.HttpConnectionManager
					if f.GetTypedConfig().UnmarshalTo(&m) != nil {
						continue
					}
					change(&m)
					a, err := anypb.New(&m)
					if err != nil {
						t.Fatal(err)
					}
					f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
				}
			}
		}
	}
}

// seen is what one request through Envoy gave.
type seen struct {
	status   int
	header   http.Header // the client's response headers
	body     string
	upstream *envoytest.Request // nil: nothing reached the upstream
	checks   []*authv3.CheckRequest
	limits   []*rlsv3.RateLimitRequest // request path first, then those sent at stream end
	err      error                     // the connection failed without an answer
}

// localAddr is the listener address a case's request reaches when it names none.
var localAddr = netip.MustParseAddrPort("192.0.2.1:8080")

// send sends r to e's listener over r.Protocol, the PROXY header naming r.Remote and r.Local
// as the connection's ends, with the recorder answering check and limit (see recorder). The
// rate-limit calls made when the stream ends come after the answer: send then sends a fence
// request on the same worker, and what was recorded before the fence's own calls is r's.
func (e *real) send(r Request, check func(*authv3.CheckRequest) *authv3.CheckResponse, limit func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse) seen {
	e.t.Helper()
	e.up.Reset()
	e.rec.Take()
	e.rec.Answer(fenceOK(check), fenceLimitOK(limit))
	s := e.exchange(r)
	if s.err == nil && s.header.Get("x-envoy-upstream-service-time") != "" {
		if !e.up.Wait(10*time.Second, func(reqs []envoytest.Request, _ int) bool { return len(reqs) > 0 }) {
			e.t.Fatalf("%s %s: answered by the upstream, which recorded nothing", r.Method, r.Path)
		}
		u := e.up.Requests()[0]
		s.upstream = &u
	}
	fence := e.at("ingress")
	fence.clientTLS = nil
	f := fence.exchange(Request{Method: "GET", Path: fencePath, Host: "fence", Remote: netip.MustParseAddrPort("192.0.2.250:1")})
	if f.status != 200 {
		e.t.Fatalf("the fence request: %d %v %q", f.status, f.err, f.body)
	}
	if !e.rec.Wait(10*time.Second, func(_ []*authv3.CheckRequest, l []*rlsv3.RateLimitRequest) bool {
		return len(l) > 0 && fenceLimit(l[len(l)-1])
	}) {
		e.t.Fatal("the fence's rate-limit call never came")
	}
	checks, limits := e.rec.Recorded()
	for _, c := range checks {
		if !isFence(c.GetAttributes().GetRequest().GetHttp().GetPath()) {
			s.checks = append(s.checks, c)
		}
	}
	for _, l := range limits {
		if !fenceLimit(l) {
			s.limits = append(s.limits, l)
		}
	}
	return s
}

// fencePath is the fence request's: the shipped items route, one rate-limit call.
const fencePath = "/items?item_id=fence"

func isFence(path string) bool { return path == fencePath }

// fenceOK answers the fence's Check OK and the others with check (OK when nil, a failed call
// when it returns nil: see envoytest.Service.Answer).
func fenceOK(check func(*authv3.CheckRequest) *authv3.CheckResponse) func(*authv3.CheckRequest) *authv3.CheckResponse {
	if check == nil {
		return nil
	}
	return func(req *authv3.CheckRequest) *authv3.CheckResponse {
		if isFence(req.GetAttributes().GetRequest().GetHttp().GetPath()) {
			return &authv3.CheckResponse{Status: &status.Status{}}
		}
		return check(req)
	}
}

// fenceLimitOK answers the fence's rate-limit call OK and the others with limit.
func fenceLimitOK(limit func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse) func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	if limit == nil {
		return nil
	}
	return func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		if fenceLimit(req) {
			return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
		}
		return limit(req)
	}
}

func fenceLimit(r *rlsv3.RateLimitRequest) bool {
	for _, d := range r.GetDescriptors() {
		for _, en := range d.GetEntries() {
			if en.GetKey() == "item_id" && en.GetValue() == "fence" {
				return true
			}
		}
	}
	return false
}

func (e *real) exchange(r Request) seen {
	e.t.Helper()
	if r.Protocol == "HTTP/2" {
		return e.sendH2(r)
	}
	return e.sendH1(r)
}

// withLocal is r with the Local address its PROXY header names: localAddr when r has none, as
// an IPv4-mapped address for an IPv6 peer (both ends are of one family).
func withLocal(r Request) Request {
	if !r.Local.IsValid() {
		r.Local = localAddr
	}
	if r.Remote.Addr().Is6() && r.Local.Addr().Is4() {
		r.Local = netip.AddrPortFrom(netip.AddrFrom16(r.Local.Addr().As16()), r.Local.Port())
	}
	return r
}

func proxyHeader(r Request) string {
	r = withLocal(r)
	fam := "TCP4"
	if r.Remote.Addr().Is6() {
		fam = "TCP6"
	}
	return fmt.Sprintf("PROXY %s %s %s %d %d\r\n", fam, r.Remote.Addr(), r.Local.Addr(), r.Remote.Port(), r.Local.Port())
}

func (e *real) dial() net.Conn {
	e.t.Helper()
	conn, err := net.DialTimeout("tcp", e.envoy.Listener(e.t, e.listener), 5*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	return conn
}

// sendH1 writes the request line and headers exactly as r has them (names sorted).
func (e *real) sendH1(r Request) seen {
	conn := e.dial()
	defer conn.Close()
	if e.clientTLS != nil {
		if _, err := io.WriteString(conn, proxyHeader(r)); err != nil {
			return seen{err: err}
		}
		tc := tls.Client(conn, e.clientTLS)
		if err := tc.Handshake(); err != nil {
			return seen{err: err}
		}
		conn = tc
	}
	proto := r.Protocol
	if proto == "" {
		proto = "HTTP/1.1"
	}
	var b strings.Builder
	if e.clientTLS == nil {
		b.WriteString(proxyHeader(r))
	}
	fmt.Fprintf(&b, "%s %s %s\r\nhost: %s\r\n", r.Method, r.Path, proto, r.Host)
	for _, k := range sortedNames(r.Headers) {
		for _, v := range r.Headers[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("connection: close\r\n\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return seen{err: err}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return seen{err: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return seen{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// sendH2 sends r over HTTP/2 without TLS (prior knowledge).
func (e *real) sendH2(r Request) seen {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DisableCompression: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			conn := e.dial()
			if _, err := io.WriteString(conn, proxyHeader(r)); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(r.Method, "http://"+r.Host+"/", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.URL.Opaque = r.Path
	req.Header["User-Agent"] = []string{""} // none unless the case has one
	for _, k := range sortedNames(r.Headers) {
		for _, v := range r.Headers[k] {
			req.Header.Add(k, v)
		}
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return seen{err: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return seen{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func sortedNames(h map[string][]string) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// requestID is the x-request-id that reached the filters: the upstream's (or the Check's) copy.
func (s seen) requestID() string {
	if s.upstream != nil {
		return s.upstream.Header.Get("x-request-id")
	}
	for _, c := range s.checks {
		if v := c.GetAttributes().GetRequest().GetHttp().GetHeaders()["x-request-id"]; v != "" {
			return v
		}
	}
	return ""
}

// generated replaces v by generatedID when it is the id Envoy generated for s, that is when
// it is a version-4 UUID the client did not send.
func generated(v, sent string) string {
	if v != sent && uuidRE.MatchString(v) {
		return generatedID
	}
	return v
}
