package envoysim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/envoytest"
	"github.com/extauthz/extauthz/rulestore"
)

// serviceSections are the top-level sections of the service config (extauthz.yaml).
var serviceSections = []string{"grpc_addr", "admin_addr", "rules_file", "log", "tls", "grpc",
	"shutdown_grace", "authz", "ratelimit", "param_names", "store"}

// loadMapping reads the service config: its sections must be known ones, and its authz and
// ratelimit sections must decode strictly into descriptors.Config.
func loadMapping(t *testing.T, path string) descriptors.Config {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for k := range top {
		known := false
		for _, s := range serviceSections {
			known = known || k == s
		}
		if !known {
			t.Errorf("%s: unknown section %q", path, k)
		}
	}
	mapping, _ := json.Marshal(map[string]json.RawMessage{"authz": top["authz"], "ratelimit": top["ratelimit"]})
	dec := json.NewDecoder(bytes.NewReader(mapping))
	dec.DisallowUnknownFields()
	var c descriptors.Config
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: authz/ratelimit sections: %v", path, err)
	}
	return c
}

// sample is an HTTP request and what the shipped routes derive from it.
type sample struct {
	name  string
	req   Request
	route string // "" when no route matches
	want  []Descriptor
}

func hdr(kv ...string) map[string][]string {
	h := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

func samples() []sample {
	ip := netip.MustParseAddrPort("192.0.2.10:40000")
	get := func(path string, h map[string][]string) Request {
		return Request{Method: "GET", Path: path, Host: "localhost:8080", Headers: h, Remote: ip}
	}
	return []sample{
		{"item with origin", get("/items?item_id=42", hdr("x-origin", "web")), "items",
			[]Descriptor{{Entries: []Entry{{"resource", "GET:/items"}, {"origin", "web"}, {"item_id", "42"}}}}},
		{"item without origin", get("/items?item_id=7", nil), "items",
			[]Descriptor{{Entries: []Entry{{"resource", "GET:/items"}, {"item_id", "7"}}}}},
		{"items without item_id", get("/items", hdr("x-origin", "web")), "items", nil},
		{"search by a browser", get("/search?q=shoes", hdr("x-origin", "mobile", "user-agent", "Mozilla/5.0")), "search",
			[]Descriptor{
				{Entries: []Entry{{"resource", "GET:/search"}, {"origin", "mobile"}, {"remote_address", "192.0.2.10"}}},
				{Entries: []Entry{{"resource", "GET:/search"}, {"origin", "mobile"}, {"query", "shoes"}}},
			}},
		{"search by a bot", get("/search", hdr("user-agent", "ExampleBot/2.1")), "search",
			[]Descriptor{
				{Entries: []Entry{{"resource", "GET:/search"}, {"remote_address", "192.0.2.10"}}},
				{Entries: []Entry{{"resource", "GET:/search"}, {"bot", "yes"}}},
			}},
		{"order", Request{Method: "POST", Path: "/orders", Host: "localhost", Headers: hdr("x-origin", "web", "x-user-id", "u1"), Remote: ip}, "orders",
			[]Descriptor{{Entries: []Entry{{"resource", "POST:/orders"}, {"origin", "web"}, {"user", "u1"}}}}},
		{"download", get("/downloads/file.bin", hdr("x-origin", "web", "x-user-id", "u1", "x-request-id", "rid-1")), "downloads",
			[]Descriptor{
				// Envoy replaces an edge request's x-request-id: the lease is the id it generates.
				{Entries: []Entry{{"resource", "GET:/downloads"}, {"origin", "web"}, {"user", "u1"}, {"lease_id", generatedID}}},
				{Entries: []Entry{{"resource", "GET:/downloads"}, {"origin", "web"}, {"user", "u1"}, {"lease_id", generatedID}}, HitsAddend: 1, HasHitsAddend: true, IsNegativeHits: true, OnStreamDone: true},
			}},
		{"report", get("/reports", hdr("x-origin", "ops", "x-api-key", "k1")), "reports", nil},
		{"POST to a GET route", Request{Method: "POST", Path: "/items?item_id=1", Host: "localhost", Remote: ip}, "", nil},
		{"unknown path", get("/nowhere", nil), "", nil},
	}
}

// TestSampleDescriptors: the descriptors the shipped routes derive from each sample, through the
// connection manager (TestRealSamples sends them through Envoy).
func TestSampleDescriptors(t *testing.T) {
	c, err := Load(shippedEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	c.RequestID = func(Request) string { return generatedID }
	mapper, err := descriptors.New(loadMapping(t, shippedDir+"extauthz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			st, err := c.Accept(s.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Route.GetName(); got != s.route {
				t.Fatalf("route = %q, want %q", got, s.route)
			}
			st.Request.DynamicMetadata = checkIdentity(t, c, mapper, st)
			got, err := c.Descriptors(st)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, s.want) {
				t.Errorf("descriptors = %+v\nwant %+v", got, s.want)
			}
		})
	}
}

// pair is a (resource, param) a rule limits and a path produces.
type pair struct{ resource, param string }

// consistency checks the Envoy config, the mapping and the rules against each other over the
// sample requests, and returns every problem found.
func consistency(c *Config, m descriptors.Config, rules rulestore.Rules, reqs []Request) []string {
	var errs []string
	resKey, originKey := m.RateLimit.ResourceKey, m.RateLimit.OriginKey
	if resKey == "" {
		resKey = "resource"
	}
	if originKey == "" {
		originKey = "origin"
	}
	leaseKey := m.RateLimit.LeaseKey
	if leaseKey == "" {
		leaseKey = descriptors.DefaultLeaseKey
	}
	// A concurrency rule's acquire and release must both carry the lease key, or a refused
	// request's release frees a slot another request holds.
	acquireNoLease := map[pair]bool{}
	releaseNoLease := map[pair]bool{}
	rlsProduced := map[pair]bool{}   // by rate-limit descriptors
	authzProduced := map[pair]bool{} // by Check through the authz mapping
	released := map[pair]bool{}      // a stream-done negative-hits descriptor releases it
	routeResources := map[string]bool{}
	var descs []Descriptor
	for _, r := range c.Routes() {
		ext, err := ContextExtensions(r)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if res := ext["resource"]; res != "" {
			routeResources[res] = true
			for p := range m.Authz.Params {
				authzProduced[pair{res, p}] = true
			}
		}
	}
	for _, req := range reqs {
		r, err := c.Match(req)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if r == nil {
			continue
		}
		ds, err := Descriptors(r, req)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		ext, _ := ContextExtensions(r)
		for _, d := range ds {
			res, ok := d.Value(resKey)
			if !ok {
				errs = append(errs, fmt.Sprintf("route %q: descriptor %v has no %q entry", r.GetName(), d.Entries, resKey))
				continue
			}
			if ext["resource"] != "" && ext["resource"] != res {
				errs = append(errs, fmt.Sprintf("route %q: ext_authz resource %q but rate-limit resource %q", r.GetName(), ext["resource"], res))
			}
			routeResources[res] = true
			_, leased := d.Value(leaseKey)
			for _, e := range d.Entries {
				if e.Key == resKey || e.Key == originKey || e.Key == leaseKey {
					continue
				}
				if d.OnStreamDone && d.IsNegativeHits {
					released[pair{res, e.Key}] = true
					releaseNoLease[pair{res, e.Key}] = releaseNoLease[pair{res, e.Key}] || !leased
				} else {
					rlsProduced[pair{res, e.Key}] = true
					acquireNoLease[pair{res, e.Key}] = acquireNoLease[pair{res, e.Key}] || !leased
				}
			}
			descs = append(descs, d)
		}
	}
	used := map[pair]hotparam.Rule{}
	var longestWait time.Duration
	for _, rule := range rules.ParamFlow {
		p := pair{rule.Resource, rule.Param}
		used[p] = rule
		if !rlsProduced[p] && !authzProduced[p] {
			errs = append(errs, fmt.Sprintf("rule %s/%s: no route produces param %q for it", rule.Resource, rule.Param, rule.Param))
		}
		if rlsProduced[p] && authzProduced[p] {
			errs = append(errs, fmt.Sprintf("rule %s/%s: both ext_authz and rate-limit produce %q, each request would count twice", rule.Resource, rule.Param, rule.Param))
		}
		if rule.Grade == hotparam.Concurrency && !released[p] {
			errs = append(errs, fmt.Sprintf("rule %s/%s: concurrency rule without a stream-done negative-hits descriptor to release it", rule.Resource, rule.Param))
		}
		if rule.Grade == hotparam.Concurrency && (acquireNoLease[p] || releaseNoLease[p]) {
			errs = append(errs, fmt.Sprintf("rule %s/%s: concurrency descriptors without a %q entry: a refused request's release would free another's slot", rule.Resource, rule.Param, leaseKey))
		}
		if rule.Behavior == hotparam.Throttle && rule.MaxQueueingTime > longestWait {
			longestWait = rule.MaxQueueingTime
		}
	}
	for _, d := range descs {
		res, _ := d.Value(resKey)
		for _, e := range d.Entries {
			if e.Key == resKey || e.Key == originKey || e.Key == leaseKey {
				continue
			}
			if _, ok := used[pair{res, e.Key}]; !ok {
				errs = append(errs, fmt.Sprintf("descriptor key %q on %s is neither %q, %q, %q nor a param a rule uses", e.Key, res, resKey, originKey, leaseKey))
			}
		}
	}
	for _, rule := range rules.Authority {
		if !routeResources[rule.Resource] {
			errs = append(errs, fmt.Sprintf("authority rule for %s: no route names that resource", rule.Resource))
		}
	}
	if rl := rateLimitFilter(c); rl != nil && rl.GetTimeout().AsDuration() <= longestWait {
		errs = append(errs, fmt.Sprintf("ratelimit timeout %v does not exceed the longest throttle wait %v", rl.GetTimeout().AsDuration(), longestWait))
	}
	sort.Strings(errs)
	errs = append(errs, allowedHeaderErrors(c, m)...)
	return dedupe(errs)
}

func dedupe(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func rateLimitFilter(c *Config) *ratelimitv3.RateLimit {
	for _, m := range c.Managers {
		for _, f := range m.GetHttpFilters() {
			var rl ratelimitv3.RateLimit
			if f.GetTypedConfig().UnmarshalTo(&rl) == nil {
				return &rl
			}
		}
	}
	return nil
}

func sampleRequests() []Request {
	var out []Request
	for _, s := range samples() {
		out = append(out, s.req)
	}
	return out
}

func loadAll(t *testing.T) (*Config, descriptors.Config, rulestore.Rules) {
	t.Helper()
	c, err := Load(shippedEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	m := loadMapping(t, shippedDir+"extauthz.yaml")
	rules, err := rulestore.Load(shippedDir+"rules.yaml", rulestore.ParseOptions{})
	if err != nil {
		t.Fatalf("rules.yaml: %v", err)
	}
	return c, m, rules
}

func TestConfigsAgree(t *testing.T) {
	c, m, rules := loadAll(t)
	if len(rules.ParamFlow) == 0 || len(rules.Authority) == 0 {
		t.Fatalf("rules.yaml: %d param_flow and %d authority rules, want some of each", len(rules.ParamFlow), len(rules.Authority))
	}
	for _, e := range consistency(c, m, rules, sampleRequests()) {
		t.Error(e)
	}
	// Every sample passes the shipped connection manager, and its route's descriptors derive
	// from the stream as from the bare request.
	for _, r := range sampleRequests() {
		st, err := c.Accept(r)
		if err != nil {
			t.Errorf("%s %s: %v", r.Method, r.Path, err)
			continue
		}
		if _, err := c.Descriptors(st); err != nil {
			t.Errorf("%s %s: %v", r.Method, r.Path, err)
		}
		if _, err := c.CheckRequest(st, time.Now()); err != nil {
			t.Errorf("%s %s: %v", r.Method, r.Path, err)
		}
	}
	// ext_authz must also outlast any throttle wait it can hit.
	var authz extauthzv3.ExtAuthz
	if err := c.Managers[0].GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&authz); err != nil {
		t.Fatal(err)
	}
	for _, r := range rules.ParamFlow {
		if _, ok := m.Authz.Params[r.Param]; ok && r.Behavior == hotparam.Throttle && authz.GetGrpcService().GetTimeout().AsDuration() <= r.MaxQueueingTime {
			t.Errorf("rule %s/%s throttles on the ext_authz path beyond its timeout", r.Resource, r.Param)
		}
	}
}

// TestConsistencyCatches makes sure the consistency check is not vacuous: each mutation of the
// shipped files must be reported.
func TestConsistencyCatches(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*descriptors.Config, *rulestore.Rules)
		want   string
	}{
		{"a rule on a param nobody produces", func(_ *descriptors.Config, r *rulestore.Rules) {
			r.ParamFlow = append(r.ParamFlow, hotparam.Rule{Resource: "GET:/items", Param: "colour", Count: 1, Duration: time.Second})
		}, `no route produces param "colour"`},
		{"a descriptor key no rule uses", func(_ *descriptors.Config, r *rulestore.Rules) {
			r.ParamFlow = r.ParamFlow[1:] // drops GET:/items item_id
		}, `descriptor key "item_id" on GET:/items is neither`},
		{"both paths produce a param", func(m *descriptors.Config, _ *rulestore.Rules) {
			m.Authz.Params = map[string]descriptors.Source{"item_id": {From: "query", Name: "item_id"}}
		}, "count twice"},
		{"a concurrency rule nobody releases", func(_ *descriptors.Config, r *rulestore.Rules) {
			r.ParamFlow = append(r.ParamFlow, hotparam.Rule{Resource: "POST:/orders", Param: "user", Grade: hotparam.Concurrency, Count: 1})
		}, "without a stream-done"},
		{"a concurrency rule whose descriptors carry no lease", func(m *descriptors.Config, _ *rulestore.Rules) {
			m.RateLimit.LeaseKey = "request"
		}, `rule GET:/downloads/user: concurrency descriptors without a "request" entry`},
		{"the lease key taken for a param", func(m *descriptors.Config, _ *rulestore.Rules) {
			m.RateLimit.LeaseKey = "request"
		}, `descriptor key "lease_id" on GET:/downloads is neither`},
		{"a throttle wait beyond the rate-limit timeout", func(_ *descriptors.Config, r *rulestore.Rules) {
			r.ParamFlow = append(r.ParamFlow, hotparam.Rule{Resource: "POST:/orders", Param: "user", Count: 1, Duration: time.Second, Behavior: hotparam.Throttle, MaxQueueingTime: 5 * time.Second})
		}, "does not exceed the longest throttle wait"},
		{"a header the mapping reads that ext_authz does not send", func(m *descriptors.Config, _ *rulestore.Rules) {
			m.Authz.Params = map[string]descriptors.Source{"api_key": {From: "header", Name: "x-api-key"}, "tenant": {From: "header", Name: "X-Tenant"}}
		}, `reads header "x-tenant"`},
		{"trusted hops without x-forwarded-for", func(m *descriptors.Config, _ *rulestore.Rules) {
			m.Authz.TrustedHops = 1
			m.Authz.Origin = append(m.Authz.Origin, descriptors.Source{From: "client_ip"})
		}, `reads header "x-forwarded-for"`},
		{"a header sent that nothing reads", func(m *descriptors.Config, _ *rulestore.Rules) {
			m.Authz.Params = nil
		}, `exact:"x-api-key"`},
		{"an authority rule for a resource no route names", func(_ *descriptors.Config, r *rulestore.Rules) {
			r.Authority = append(r.Authority, r.Authority[0])
			r.Authority[len(r.Authority)-1].Resource = "GET:/elsewhere"
		}, "authority rule for GET:/elsewhere"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, m, rules := loadAll(t)
			tt.mutate(&m, &rules)
			errs := consistency(c, m, rules, sampleRequests())
			if !strings.Contains(strings.Join(errs, "\n"), tt.want) {
				t.Errorf("consistency errors = %q, want one mentioning %q", errs, tt.want)
			}
		})
	}
}

// allowedHeaderErrors reports where ext_authz's allowed_headers and the headers the service
// reads (the authz mapping's and serviceHeaders) disagree: a header read but not sent (the
// source would always be empty) or one sent but never read (a Check carrying what it does not
// need, cookies or credentials say).
func allowedHeaderErrors(c *Config, m descriptors.Config) []string {
	authz, _, err := c.Filters()
	if err != nil || authz == nil {
		return []string{fmt.Sprintf("no ext_authz filter: %v", err)}
	}
	read := map[string]bool{}
	for _, h := range serviceHeaders {
		read[h] = true
	}
	for _, src := range append(append([]descriptors.Source(nil), m.Authz.Origin...), mapValues(m.Authz.Params)...) {
		switch src.From {
		case "header":
			read[strings.ToLower(src.Name)] = true
		case "cookie":
			read["cookie"] = true
		case "client_ip":
			if m.Authz.TrustedHops > 0 {
				read["x-forwarded-for"] = true
			}
		}
	}
	allowed, err := keyMatcher(authz.GetAllowedHeaders())
	if err != nil {
		return []string{err.Error()}
	}
	if allowed == nil {
		return []string{"ext_authz has no allowed_headers: every header of every request goes to the service"}
	}
	var errs []string
	for h := range read {
		if !allowed(h) {
			errs = append(errs, fmt.Sprintf("the authz mapping reads header %q, which ext_authz's allowed_headers does not send", h))
		}
	}
	for _, p := range authz.GetAllowedHeaders().GetPatterns() {
		if e := p.GetExact(); read[e] || (e == "" && p.GetPrefix() == b3Prefix) {
			continue
		}
		errs = append(errs, fmt.Sprintf("ext_authz's allowed_headers pattern %v lets through a header the service does not read", p))
	}
	sort.Strings(errs)
	return errs
}

// serviceHeaders are the request headers the service reads besides the mapping's: the decision
// log's x-request-id and the trace context its spans continue (W3C; B3, also as b3Prefix).
var serviceHeaders = []string{"x-request-id", "traceparent", "tracestate", "b3",
	"x-b3-traceid", "x-b3-spanid", "x-b3-sampled", "x-b3-flags",
	"content-type"} // a gRPC call's refusal carries grpc-status (envoyapi.isGRPC)

const b3Prefix = "x-b3-"

func mapValues(m map[string]descriptors.Source) []descriptors.Source {
	var out []descriptors.Source
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// checkIdentity is the dynamic metadata the service's allowed Check gives st (resource and
// origin under envoy.filters.http.ext_authz, as envoyapi writes them): the CheckRequest the
// emulation builds for st, mapped by the shipped mapping. The shipped rate-limit actions read
// the origin from it.
func checkIdentity(t *testing.T, c *Config, m *descriptors.Mapper, st *Stream) map[string]*structpb.Struct {
	t.Helper()
	cr, err := c.CheckRequest(st, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if cr == nil {
		return nil // no Check (no route): no metadata
	}
	v := envoytest.Identity(m, cr)
	if v == nil {
		t.Fatalf("the mapping refuses %v", cr)
	}
	return map[string]*structpb.Struct{ExtAuthzFilter: v}
}
