package envoyapi

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/rulestore"
)

// t0 is the fake clock's start, exact to the nanosecond.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)

// clock is a fake clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type decision struct {
	api, domain, resource string
	result                policy.Outcome
}

// recorder is a Recorder that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	lastSeen decision
	n        int
	waits    []time.Duration
}

var _ policy.Recorder = (*recorder)(nil)

func (r *recorder) Decision(api, domain, resource string, result policy.Outcome, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastSeen = decision{api, domain, resource, result}
	r.n++
}

func (r *recorder) QueueWait(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
}

func (r *recorder) last() decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastSeen
}

func (r *recorder) queueWaits() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.waits...)
}

// rig is a Server on a loopback gRPC port with clients, a fake clock and a recorder.
type rig struct {
	clock *clock
	rec   *recorder
	srv   *Server
	auth  authv3.AuthorizationClient
	rls   rlsv3.RateLimitServiceClient
}

type rigConfig struct {
	mapping   descriptors.Config
	authority []authority.Rule
	paramFlow []hotparam.Rule
	noRules   bool // Rules returns nil
}

func newRig(t testing.TB, cfg rigConfig) *rig {
	t.Helper()
	m, err := descriptors.New(cfg.mapping)
	if err != nil {
		t.Fatalf("descriptors.New: %v", err)
	}
	list, err := authority.New(cfg.authority)
	if err != nil {
		t.Fatalf("authority.New: %v", err)
	}
	lim, err := hotparam.New(cfg.paramFlow, hotparam.Options{})
	if err != nil {
		t.Fatalf("hotparam.New: %v", err)
	}
	set := &rulestore.Set{Version: 1, Authority: list, ParamFlow: lim,
		Rules: rulestore.Rules{Authority: cfg.authority, ParamFlow: cfg.paramFlow}}
	r := &rig{clock: &clock{t: t0}, rec: &recorder{}}
	r.srv = New(Options{
		Mapper: m,
		Policy: policy.Options{
			Rules: func() *rulestore.Set {
				if cfg.noRules {
					return nil
				}
				return set
			},
			Now:      r.clock.Now,
			Recorder: r.rec,
		},
	})
	conn := serve(t, r.srv.Register)
	r.auth = authv3.NewAuthorizationClient(conn)
	r.rls = rlsv3.NewRateLimitServiceClient(conn)
	return r
}

// serve starts a gRPC server on loopback with register, and returns a client connection to it.
func serve(t testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
	})
	return conn
}

// ctx is a call context with a generous deadline.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// httpReq describes a check request briefly.
type httpReq struct {
	method, path, host string
	headers            map[string]string
	addr, principal    string
	ext                map[string]string
}

func (h httpReq) build() *authv3.CheckRequest {
	src := &authv3.AttributeContext_Peer{Principal: h.principal}
	if h.addr != "" {
		src.Address = &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: h.addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}},
		}}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: src,
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: h.method, Path: h.path, Host: h.host, Headers: h.headers,
		}},
		ContextExtensions: h.ext,
	}}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func rlReq(domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// body is the decoded JSON body of a block.
type body struct {
	Blocked  string `json:"blocked"`
	Rule     int    `json:"rule"`
	Resource string `json:"resource"`
	Origin   string `json:"origin"`
	Param    string `json:"param"`
	Value    string `json:"value"`
	Reason   string `json:"reason"`
	Error    string `json:"error"`
}

func decodeBody(t testing.TB, s string) body {
	t.Helper()
	var b body
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		t.Fatalf("body %q is not JSON: %v", s, err)
	}
	return b
}

// headers returns the header options as a map, failing on any without the explicit
// OVERWRITE_IF_EXISTS_OR_ADD append action or repeated.
func headers(t testing.TB, hs []*corev3.HeaderValueOption) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, h := range hs {
		if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
			t.Errorf("header %q: append action %v, want OVERWRITE_IF_EXISTS_OR_ADD", h.GetHeader().GetKey(), h.GetAppendAction())
		}
		if _, dup := m[h.GetHeader().GetKey()]; dup {
			t.Errorf("header %q given twice", h.GetHeader().GetKey())
		}
		m[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	return m
}
