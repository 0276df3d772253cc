package envoy

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// svcMetric sums the samples of the extauthz metric name whose labels contain every one of
// labels (`api="ext_authz"`), from the service's /metrics.
func (s *stack) svcMetric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	code, body := s.svc.Get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("extauthz /metrics: %d", code)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		metric, _, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(series, l)
		}
		if !all {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("/metrics %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// serviceChecks is how many Check calls extauthz has decided, by its own metrics.
func (s *stack) serviceChecks(t *testing.T) float64 {
	return s.svcMetric(t, "extauthz_decision_duration_seconds_count", `api="ext_authz"`)
}

// TestPathVariants sends GET /items spelled in several ways, each request line exactly as
// written, through the shipped connection manager (normalize_path, merge_slashes,
// path_with_escaped_slashes_action REJECT_REQUEST). A spelling Envoy resolves to /items
// reaches the route and the upstream as /items and costs one Check; one Envoy refuses gets
// 400 before any filter runs: no Check, nothing upstream.
func TestPathVariants(t *testing.T) {
	s := newStack(t, stackOptions{})
	// Each case asks for its own item_id ({n} below), so that none is limited by another.
	cases := []struct {
		name, target string
		status       int
		upstream     string // the path the upstream receives; "" when nothing reaches it
	}{
		{"as is", "/items?item_id=pv{n}", 200, "/items?item_id=pv{n}"},
		{"dot segment", "/./items?item_id=pv{n}", 200, "/items?item_id=pv{n}"},
		{"dot-dot segment", "/x/../items?item_id=pv{n}", 200, "/items?item_id=pv{n}"},
		{"dot-dot above the root", "/../../items?item_id=pv{n}", 200, "/items?item_id=pv{n}"},
		{"escaped unreserved character", "/%69tems?item_id=pv{n}", 200, "/items?item_id=pv{n}"},
		{"every character escaped", "/%69%74%65%6D%73?item_id=pv{n}", 200, "/items?item_id=pv{n}"},
		{"merged slashes", "//items?item_id=pv{n}", 200, "/items?item_id=pv{n}"},
		{"backslash", "/x\\..\\items?item_id=pv{n}", 200, "/items?item_id=pv{n}"},
		// The query is not normalised: the upstream gets it as sent.
		{"query left as sent", "/items?item_id=p%76{n}", 200, "/items?item_id=p%76{n}"},
		{"escaped slash", "/it%2Fems?item_id=pv{n}", 400, ""},
		{"escaped slash, lower case", "/items%2f?item_id=pv{n}", 400, ""},
		{"escaped backslash", "/it%5Cems?item_id=pv{n}", 400, ""},
		{"fragment", "/items#frag", 400, ""},
		{"fragment after the query", "/items?item_id=pv{n}#frag", 400, ""},
		// Routes match case-sensitively, and /items is an exact path.
		{"another case", "/ITEMS?item_id=pv{n}", 404, ""},
		{"a trailing slash", "/items/?item_id=pv{n}", 404, ""},
		{"no route", "/nothing", 404, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seq := fmt.Sprintf("path-%d", i)
			checks, svc := s.checks(), s.serviceChecks(t)
			n := strconv.Itoa(i)
			target, want := strings.ReplaceAll(c.target, "{n}", n), strings.ReplaceAll(c.upstream, "{n}", n)
			a := s.raw(target, "x-origin", "web", seqHeader, seq)
			if a.status != c.status {
				t.Fatalf("GET %s: %d %q, want %d", target, a.status, a.body, c.status)
			}
			got := s.reached(seq)
			switch {
			case want == "" && len(got) != 0:
				t.Errorf("GET %s reached the upstream as %q", target, got[0].Path)
			case want != "" && (len(got) != 1 || got[0].Path != want):
				t.Errorf("GET %s: the upstream saw %v, want one %s", target, got, want)
			}
			wantChecks := int64(0)
			if c.status == 200 {
				wantChecks = 1
			}
			if d := s.checks() - checks; d != wantChecks {
				t.Errorf("GET %s: Envoy completed %d Check calls, want %d", target, d, wantChecks)
			}
			if d := s.serviceChecks(t) - svc; d != float64(wantChecks) {
				t.Errorf("GET %s: extauthz decided %v Check calls, want %d", target, d, wantChecks)
			}
		})
	}
}

// TestUnroutedPathGetsNoCheck: a request no route matches is answered 404 by Envoy's router
// and the ext_authz filter sends no Check for it (it finds no route and lets the stream on),
// over both protocols, whatever its method.
func TestUnroutedPathGetsNoCheck(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			checks, svc := s.checks(), s.serviceChecks(t)
			for _, r := range []struct{ method, path string }{
				{"GET", "/nothing"}, {"GET", "/admin/users"}, {"POST", "/items"}, {"DELETE", "/reports"}, {"GET", "/downloads"},
			} {
				a := s.do(p.c, r.method, r.path, "x-origin", "web", seqHeader, "unrouted-"+p.name)
				if a.status != http.StatusNotFound {
					t.Errorf("%s %s: %d %q, want Envoy's 404", r.method, r.path, a.status, a.body)
				}
			}
			if got := s.reached("unrouted-" + p.name); len(got) != 0 {
				t.Errorf("an unrouted request reached the upstream: %v", got)
			}
			if d := s.checks() - checks; d != 0 {
				t.Errorf("Envoy completed %d Check calls for unrouted requests, want 0", d)
			}
			if d := s.serviceChecks(t) - svc; d != 0 {
				t.Errorf("extauthz decided %v Check calls for unrouted requests, want 0", d)
			}
			// The same stack does Check a routed request: the counters above can move.
			if a := s.do(p.c, "GET", "/reports", "x-origin", "web", "x-api-key", "routed-"+p.name); a.status != 200 {
				t.Fatalf("GET /reports: %d %q", a.status, a.body)
			}
			if d := s.checks() - checks; d != 1 {
				t.Errorf("Envoy completed %d Check calls for one routed request, want 1", d)
			}
			if d := s.serviceChecks(t) - svc; d != 1 {
				t.Errorf("extauthz decided %v Check calls for one routed request, want 1", d)
			}
		})
	}
	// The emulation sends none either.
	c := sim(t, nil)
	st := simStream(t, c, "GET", "/nothing")
	if cr, err := c.CheckRequest(st, time.Now()); err != nil || cr != nil {
		t.Errorf("envoysim: GET /nothing: Check %v, %v; Envoy sends none", cr, err)
	}
}
