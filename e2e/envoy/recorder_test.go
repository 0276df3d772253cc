package envoy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/internal/envoytest"
)

// recorder stands in for extauthz behind Envoy's extauthz cluster: it records every Check and
// ShouldRateLimit call Envoy makes, exactly as received, and answers them as told (allow and
// OK unless set). It serves gRPC health, which the cluster's health check asks. It is safe for
// concurrent use.
type recorder struct {
	authv3.UnimplementedAuthorizationServer
	rlsv3.UnimplementedRateLimitServiceServer
	addr string

	mu     sync.Mutex
	checks []*authv3.CheckRequest
	limits []*rlsv3.RateLimitRequest
	// limit answers a ShouldRateLimit call; nil answers OK for every descriptor.
	limit func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, r)
	rlsv3.RegisterRateLimitServiceServer(srv, r)
	healthpb.RegisterHealthServer(srv, health.NewServer()) // SERVING for ""
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *recorder) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	r.mu.Lock()
	r.checks = append(r.checks, req)
	r.mu.Unlock()
	return &authv3.CheckResponse{Status: &status.Status{}}, nil
}

func (r *recorder) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	r.mu.Lock()
	r.limits = append(r.limits, req)
	answer := r.limit
	r.mu.Unlock()
	if answer != nil {
		return answer(req), nil
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

// answer sets how ShouldRateLimit answers from now on.
func (r *recorder) answer(f func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse) {
	r.mu.Lock()
	r.limit = f
	r.mu.Unlock()
}

// take returns the calls recorded since the last take and forgets them.
func (r *recorder) take() ([]*authv3.CheckRequest, []*rlsv3.RateLimitRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, l := r.checks, r.limits
	r.checks, r.limits = nil, nil
	return c, l
}

// descriptors writes each descriptor of req as "key=value,key=value", in order, with
// " hits=N" for a hits_addend and " negative" for is_negative_hits.
func descriptors(req *rlsv3.RateLimitRequest) []string {
	var out []string
	for _, d := range req.GetDescriptors() {
		var b strings.Builder
		for i, e := range d.GetEntries() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(e.GetKey() + "=" + e.GetValue())
		}
		if h := d.GetHitsAddend(); h != nil {
			fmt.Fprintf(&b, " hits=%d", h.GetValue())
		}
		if d.GetIsNegativeHits() {
			b.WriteString(" negative")
		}
		out = append(out, b.String())
	}
	return out
}

// newRecordedStack starts Envoy on bootstrap (the shipped one when nil) with its extauthz
// cluster pointing at a recorder instead of the service, and the recording upstream.
func newRecordedStack(t *testing.T, bootstrap []byte) (*stack, *recorder) {
	t.Helper()
	envoytest.Binary(t)
	rec := startRecorder(t)
	if bootstrap == nil {
		var err error
		if bootstrap, err = os.ReadFile(envoyYAML); err != nil {
			t.Fatal(err)
		}
	}
	s := &stack{t: t, up: envoytest.StartUpstream(t)}
	cfg, err := envoytest.Bootstrap(bootstrap, envoytest.Rewrite{Upstreams: map[string][]string{
		"extauthz": {rec.addr},
		"upstream": {s.up.Addr},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.envoy = envoytest.Start(t, envoytest.Options{Config: cfg})
	s.addr = s.envoy.Listener(t, "ingress")
	s.base = "http://" + s.addr
	return s, rec
}

// variant returns the shipped envoy.yaml after edit, which changes the decoded document in
// place (numbers as json.Number). Each test that runs a variant names its edit.
func variant(t *testing.T, edit func(root map[string]any)) []byte {
	t.Helper()
	src, err := os.ReadFile(envoyYAML)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(src)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		t.Fatal(err)
	}
	edit(root)
	out, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Paths into the shipped bootstrap's one listener, for variants.

func obj(v any) map[string]any { return v.(map[string]any) }

func listener(root map[string]any) map[string]any {
	return obj(obj(root["static_resources"])["listeners"].([]any)[0])
}

// hcm is the typed_config of the listener's HTTP connection manager.
func hcm(root map[string]any) map[string]any {
	chain := obj(listener(root)["filter_chains"].([]any)[0])
	return obj(obj(chain["filters"].([]any)[0])["typed_config"])
}

// httpFilter is the typed_config of the HTTP filter called name.
func httpFilter(root map[string]any, name string) map[string]any {
	for _, f := range hcm(root)["http_filters"].([]any) {
		if obj(f)["name"] == name {
			return obj(obj(f)["typed_config"])
		}
	}
	panic("no http filter " + name)
}

// vhost is the route table's one virtual host.
func vhost(root map[string]any) map[string]any {
	return obj(obj(hcm(root)["route_config"])["virtual_hosts"].([]any)[0])
}

// route is the virtual host's route called name.
func route(root map[string]any, name string) map[string]any {
	for _, r := range vhost(root)["routes"].([]any) {
		if obj(r)["name"] == name {
			return obj(r)
		}
	}
	panic("no route " + name)
}
