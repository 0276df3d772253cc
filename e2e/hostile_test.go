package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi/wire"
	"github.com/extauthz/extauthz/internal/envoysim"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// rawClients are clients that send strings as raw bytes, as Envoy does: Go's default codec
// refuses to encode a proto3 string that is not UTF-8, Envoy's C++ does not check.
func (s *service) rawClients(t *testing.T) (authv3.AuthorizationClient, rlsv3.RateLimitServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wire.NewCodec())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn), rlsv3.NewRateLimitServiceClient(conn)
}

// TestInvalidUTF8IsDecided: a header or descriptor value that is not UTF-8 gets a decision on
// its bytes, never a decode error (which Envoy's ratelimit filter, failing open, would turn into
// an allow). Without the service's lenient codec every call here fails with Internal.
func TestInvalidUTF8IsDecided(t *testing.T) {
	rules, err := os.ReadFile(rulesYAML)
	if err != nil {
		t.Fatal(err)
	}
	s := newService(t, rules)
	authz, rls := s.rawClients(t)

	t.Run("ratelimit: a used-up value stays refused", func(t *testing.T) {
		// GET:/items allows 5 a second with a burst of 2 per item: 7 at once, 5 a second more.
		rr := limitRequest(t, itemReq("bad\xffitem"), false)
		ok, refused := 0, 0
		start := time.Now()
		for i := 0; i < 20; i++ {
			resp, err := rls.ShouldRateLimit(context.Background(), rr)
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				ok++
			} else {
				refused++
			}
		}
		if allowance := 7 + int(5*time.Since(start).Seconds()) + 1; ok < 1 || ok > allowance || refused == 0 {
			t.Errorf("%d of 20 admitted, %d refused, for a value with an invalid byte; want 1..%d admitted and some refused", ok, refused, allowance)
		}
		// Another invalid value is another value: its bucket is full.
		resp, err := rls.ShouldRateLimit(context.Background(), limitRequest(t, itemReq("bad\xfeitem"), false))
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("a different invalid value: %v, %v; want OK (its own bucket)", resp.GetOverallCode(), err)
		}
	})

	t.Run("ratelimit: a domain and a key that are not UTF-8 get an answer", func(t *testing.T) {
		rr := limitRequest(t, itemReq("plain"), false)
		rr.Domain = "extauthz\xff"
		rr.Descriptors[0].Entries = append(rr.Descriptors[0].Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k\xfe", Value: "v"})
		if _, err := rls.ShouldRateLimit(context.Background(), rr); err != nil {
			t.Errorf("ShouldRateLimit: %v, want an answer", err)
		}
	})

	check := func(t *testing.T, kv ...string) int {
		t.Helper()
		r := req("GET", "/items?item_id=u", "192.0.2.40", kv...)
		route, err := envoy.Match(r)
		if err != nil {
			t.Fatal(err)
		}
		cr, err := envoysim.CheckRequest(route, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := authz.Check(context.Background(), cr)
		if err != nil {
			t.Fatalf("Check with %q: %v", kv, err)
		}
		return checkCode(t, resp)
	}
	t.Run("ext_authz: a legitimate request with a non-UTF-8 header passes", func(t *testing.T) {
		if got := check(t, "x-origin", "web", "x-note", "caf\xe9"); got != 200 {
			t.Errorf("Check = %d, want 200", got)
		}
	})
	t.Run("ext_authz: a non-UTF-8 origin is not on the white list", func(t *testing.T) {
		if got := check(t, "x-origin", "web\xff"); got != 403 {
			t.Errorf("Check = %d, want 403", got)
		}
	})
}

// TestPathVariantsHitTheRule: spellings of a path that an origin server resolves to the same
// path hit the rule written for it, with Envoy's normalisation off (the service does not rely
// on it). Without the service's normalisation every variant is allowed.
func TestPathVariantsHitTheRule(t *testing.T) {
	s := newService(t, []byte(`authority:
  - resource: "GET:/admin/users"
    strategy: black
    origins: [intruder]
`))
	for _, p := range []string{"/admin/users", "/admin/user%73", "//admin//users", "/admin/./users",
		"/x/../admin/users", "/admin/%75sers?x=1", "/admin\\users", "admin/users"} {
		for _, method := range []string{"GET", "get"} {
			r := req(method, p, "192.0.2.41", "x-origin", "intruder")
			cr, err := envoysim.CheckRequest(nil, r, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if got := checkCode(t, s.checkRaw(t, cr)); got != 403 {
				t.Errorf("%s %s from the black-listed origin: %d, want 403", method, p, got)
			}
		}
	}
	// Through the shipped Envoy's connection manager (normalize_path, merge_slashes), which
	// normalises first: the two layers agree. The shipped routes have none for /admin/users
	// (Envoy would answer 404 and send no Check), so the Check is built from the normalised
	// request as a route for it would send it.
	for _, p := range []string{"/admin/user%73", "//admin//users", "/admin/./users", "/x/../admin/users"} {
		r := req("GET", p, "192.0.2.41", "x-origin", "intruder")
		st, err := envoy.Accept(r)
		if err != nil {
			t.Fatal(err)
		}
		if st.Request.Path != "/admin/users" {
			t.Errorf("Envoy passes %s on as %s", p, st.Request.Path)
		}
		cr, err := envoysim.CheckRequest(nil, st.Request, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got := checkCode(t, s.checkRaw(t, cr)); got != 403 {
			t.Errorf("%s through Envoy: %d, want 403", p, got)
		}
	}
	var lr *envoysim.LocalReply
	if _, err := envoy.Accept(req("GET", "/admin%2Fusers", "192.0.2.41")); !errors.As(err, &lr) || lr.Code != 400 {
		t.Errorf("the shipped Envoy passes an encoded slash: %v", err)
	}
	// An encoded slash is data, not a separator: another path (the shipped Envoy refuses it).
	r := req("GET", "/admin%2Fusers", "192.0.2.41", "x-origin", "intruder")
	cr, err := envoysim.CheckRequest(nil, r, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := checkCode(t, s.checkRaw(t, cr)); got != 200 {
		t.Errorf("GET /admin%%2Fusers: %d, want 200 (another resource)", got)
	}
}

// checkRaw sends cr as it is.
func (s *service) checkRaw(t *testing.T, cr *authv3.CheckRequest) *authv3.CheckResponse {
	t.Helper()
	resp, err := s.authz.Check(context.Background(), cr)
	if err != nil {
		t.Fatalf("Check %s: %v", cr.GetAttributes().GetRequest().GetHttp().GetPath(), err)
	}
	return resp
}

// startWith runs the binary on a service config and rules of the test's own (addresses from
// flags), and returns an ext_authz client to it.
func startWith(t *testing.T, config, rules string) authv3.AuthorizationClient {
	t.Helper()
	dir := t.TempDir()
	cfg, rulesPath := filepath.Join(dir, "extauthz.yaml"), filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rulesPath, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, testbin.Options{Binary: binary, Dir: dir, Args: []string{"serve",
		"--config", cfg, "--rules", rulesPath, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}})
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

// TestOversizedSourceRefusesOnlyItsRules: a cookie over descriptors.MaxLen or a query parameter
// repeated more than descriptors.MaxValues times is refused (400) only on a resource with a
// rule that reads it; every other route decides as usual. Without the rule-aware mapping every
// one of these requests is answered 400.
func TestOversizedSourceRefusesOnlyItsRules(t *testing.T) {
	authz := startWith(t, `
authz:
  origin: [{from: cookie, name: sid}]
  params:
    tag: {from: query, name: tag}
`, `
authority:
  - {resource: "GET:/guarded", strategy: white, origins: [s1]}
param_flow:
  - {resource: "GET:/tagged", param: tag, grade: qps, count: 100, duration: 1s}
`)
	bigCookie := "sid=" + strings.Repeat("c", descriptors.MaxLen+1)
	manyTags := "?" + strings.Repeat("tag=t&", descriptors.MaxValues+1)
	tests := []struct {
		name   string
		path   string
		cookie string
		want   int
	}{
		{"big cookie, no rule reads the origin", "/free", bigCookie, 200},
		{"big cookie, a rule reads the origin", "/guarded", bigCookie, 400},
		{"big cookie on a rule that reads only tag", "/tagged?tag=a", bigCookie, 200},
		{"65 tags, no rule reads tag", "/free" + manyTags, "", 200},
		{"65 tags where the origin is read, not tag", "/guarded" + manyTags, "sid=s1", 200},
		{"65 tags, a rule reads tag", "/tagged" + manyTags, "", 400},
		{"the white list still holds", "/guarded", "sid=s2", 403},
	}
	for _, tt := range tests {
		var kv []string
		if tt.cookie != "" {
			kv = []string{"cookie", tt.cookie}
		}
		cr, err := envoysim.CheckRequest(nil, req("GET", tt.path, "192.0.2.42", kv...), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := authz.Check(context.Background(), cr)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := checkCode(t, resp); got != tt.want {
			t.Errorf("%s: Check = %d, want %d (%s)", tt.name, got, tt.want, resp.GetDeniedResponse().GetBody())
		}
	}
}
