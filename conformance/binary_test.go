package conformance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
	"github.com/extauthz/extauthz/rulestore"
)

var binary = testbin.Lazy{ModuleRoot: ".."}

func TestMain(m *testing.M) {
	code := m.Run()
	binary.Close()
	os.Exit(code)
}

// TestImportedNeverAdmitsMore: the cases where an imported Sentinel rule used to load and let
// through requests Sentinel refuses, run through the built binary (rate-limit API, one
// descriptor per request at once) and held to the decisions Sentinel's own code makes: a
// limitApp with spaces or a CIDR range, a second authority rule, respelt numbers of a typed
// item, a gateway prefix pattern. Each load also gives its warning.
func TestImportedNeverAdmitsMore(t *testing.T) {
	bin := binary.Path(t)
	want := map[string]string{ // case -> a warning it must give
		"authority/white-list-spaces":       `limitApp entries " appB" have spaces around them`,
		"authority/white-list-cidr":         `limitApp entries "10.0.0.0/8" are compared as text`,
		"authority/black-list-ip":           `limitApp entries "10.0.0.0/8" are compared as text`,
		"authority/two-rules-first-wins":    "a second authority rule on this resource is ignored",
		"items/int-respellings":             "",
		"items/int-equal-items-last-wins":   "are one value (7) to Sentinel: the last one's count, 2, applies",
		"gateway/prefix-limits-every-value": "paramItem.matchStrategy 1 (prefix) is not implemented by Sentinel",
		"authority/white-then-black":        "a second authority rule on this resource is ignored",
		"items/integer-spelling-is-string":  `classType "Integer" is read as String by Sentinel`,
		"items/long-and-unicode-digits":     "",
		"items/double-items":                "",
		"items/boolean-items":               `object "TRUE" of classType boolean is the value "true" to Sentinel`,
		"authority/substring":               "",
		"authority/trailing-comma":          "",
		"gateway/exact-others-pass":         "",
	}
	var cases []Case
	for _, c := range loadCases(t) {
		if _, ok := want[c.Name]; ok && sameInstant(c) && c.Relation == "" {
			cases = append(cases, c)
		}
	}
	if testing.Short() {
		t.Skip("runs Sentinel's Java code; skipped under -short")
	}
	res, err := sentinel.Run(cases, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "rules.json")
			if err := os.WriteFile(path, c.Document(), 0o644); err != nil {
				t.Fatal(err)
			}
			if w := want[c.Name]; w != "" {
				rules, err := rulestore.Load(path, rulestore.ParseOptions{ParamNames: c.ParamNames()})
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(strings.Join(rules.Warnings, "\n"), w) {
					t.Errorf("warnings %q, want one containing %q", rules.Warnings, w)
				}
			}
			p := testbin.Start(t, testbin.Options{
				Binary: bin,
				Args:   []string{"serve", "--rules", path, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
				Env:    []string{"EXTAUTHZ_PARAM_NAMES=" + strings.Join(c.ParamNames(), ",")},
			})
			conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rls := rlsv3.NewRateLimitServiceClient(conn)
			for i, r := range c.Trace {
				if r.Origin == "" && len(c.AuthorityRules) > 0 {
					continue // empty origin on a white list: refused on purpose (the differential test checks it)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := rls.ShouldRateLimit(ctx, rateLimitRequest(c, r))
				cancel()
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				s := res[c.Name].Decisions[i]
				if got := resp.GetOverallCode() == rlsv3.RateLimitResponse_OK; got != s.Allow {
					t.Errorf("request %d %+v: extauthz allows %v, Sentinel %v", i, r, got, s.Allow)
				}
			}
		})
	}
}

// sameInstant reports whether every request of c is at one instant, so that the wall clock the
// binary runs on cannot refill anything between them.
func sameInstant(c Case) bool {
	for _, r := range c.Trace {
		if r.T != c.Trace[0].T {
			return false
		}
	}
	return true
}

// rateLimitRequest is r as one rate-limit descriptor: resource, origin and each param.
func rateLimitRequest(c Case, r Request) *rlsv3.RateLimitRequest {
	d := &ratelimitcommonv3.RateLimitDescriptor{}
	add := func(k, v string) {
		d.Entries = append(d.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	add("resource", r.Resource)
	if r.Origin != "" {
		add("origin", r.Origin)
	}
	if r.Gateway != nil {
		for _, p := range gatewayParams(r.Resource, r.Gateway) {
			add(p.Name, p.Values[0])
		}
	}
	names := c.ParamNames()
	for j, vs := range r.Args {
		for _, v := range vs {
			add(names[j], v)
		}
	}
	return &rlsv3.RateLimitRequest{Domain: "conformance", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}, HitsAddend: uint32(max(r.Hits, 1))}
}
