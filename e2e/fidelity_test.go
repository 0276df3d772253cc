package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/extauthz/extauthz/internal/envoysim"
)

// TestTrustedHopsIsXffNumTrustedHops: with authz.trusted_hops N and Envoy's
// xff_num_trusted_hops N, the service's client_ip is the address Envoy itself settled on
// (ConnectionManagerUtility::mutateRequestHeaders): the TCP peer for 0, the entry N-1 from the
// right of the x-forwarded-for Envoy received otherwise. Each run white-lists exactly the
// address Envoy picked, so any other pick is refused. Before the fix the service read the
// x-forwarded-for Envoy forwards (with the peer appended) one hop short.
func TestTrustedHopsIsXffNumTrustedHops(t *testing.T) {
	const peer = "192.0.2.60"
	received := "203.0.113.7, 198.51.100.2"
	want := map[int]string{0: peer, 1: "198.51.100.2", 2: "203.0.113.7", 3: peer}
	for hops := 0; hops <= 3; hops++ {
		t.Run(fmt.Sprintf("hops=%d", hops), func(t *testing.T) {
			c, err := envoysim.Load(envoyYAML)
			if err != nil {
				t.Fatal(err)
			}
			c.Managers[0].XffNumTrustedHops = uint32(hops)
			authz, _, err := c.Filters()
			if err != nil {
				t.Fatal(err)
			}
			// The mapping reads x-forwarded-for when trusted_hops > 0: it must be sent.
			authz.AllowedHeaders.Patterns = append(authz.AllowedHeaders.Patterns,
				&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "x-forwarded-for"}})
			if err := setExtAuthz(c, authz); err != nil {
				t.Fatal(err)
			}
			r := req("GET", "/items?item_id=th", peer, "x-forwarded-for", received)
			st, err := c.Accept(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Client.String(); got != want[hops] {
				t.Fatalf("envoysim picks %s, want %s: the emulation is off", got, want[hops])
			}
			if got := st.Request.Headers["x-forwarded-for"][0]; got != "203.0.113.7, 198.51.100.2,"+peer {
				t.Fatalf("x-forwarded-for after Envoy = %q", got)
			}
			client := startWith(t, "authz:\n  origin: [{from: client_ip}]\n  trusted_hops: "+strconv.Itoa(hops)+"\n",
				"authority:\n  - {resource: \"GET:/items\", strategy: white, origins: [\""+want[hops]+"\"]}\n")
			cr, err := c.CheckRequest(st, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if got := cr.GetAttributes().GetSource().GetAddress().GetSocketAddress().GetAddress(); got != peer {
				t.Errorf("CheckRequest source = %s, want the TCP peer %s", got, peer)
			}
			resp, err := client.Check(context.Background(), cr)
			if err != nil {
				t.Fatal(err)
			}
			if got := checkCode(t, resp); got != 200 {
				t.Errorf("Check = %d, want 200: the service's client_ip is not Envoy's %s (%s)", got, want[hops], resp.GetDeniedResponse().GetBody())
			}
			// Another client behind the same proxies is refused: the pick is not a constant.
			other := req("GET", "/items?item_id=th", "192.0.2.61", "x-forwarded-for", "203.0.113.8, 198.51.100.3")
			ost, err := c.Accept(other)
			if err != nil {
				t.Fatal(err)
			}
			ocr, err := c.CheckRequest(ost, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			resp, err = client.Check(context.Background(), ocr)
			if err != nil {
				t.Fatal(err)
			}
			if got := checkCode(t, resp); got != 403 {
				t.Errorf("another client: Check = %d, want 403", got)
			}
		})
	}
}

// TestConnectionManagerHeaders: what Envoy's connection manager does before any filter reaches
// the service with exact values: the client's x-request-id replaced on an edge request, the
// peer appended to x-forwarded-for, x-forwarded-proto and x-envoy-external-address set, the
// stream id and protocol in the CheckRequest, and only allowed_headers sent.
func TestConnectionManagerHeaders(t *testing.T) {
	r := req("GET", "/items?item_id=cm", "192.0.2.62", "x-origin", "web", "x-forwarded-for", "203.0.113.9",
		"x-forwarded-proto", "https", "x-envoy-retry-on", "5xx", "cookie", "session=secret")
	r.Headers["x-request-id"] = []string{"client-chosen"}
	// Envoy's own request id generator (the suite's names test requests instead).
	c, err := envoysim.Load(envoyYAML)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Accept(r)
	if err != nil {
		t.Fatal(err)
	}
	h := st.Request.Headers
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for name, want := range map[string]string{
		"x-forwarded-for":          "203.0.113.9,192.0.2.62",
		"x-forwarded-proto":        "http", // xff_num_trusted_hops 0: the client's value is not trusted
		"x-envoy-external-address": "192.0.2.62",
	} {
		if got := h[name]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := h["x-request-id"]; len(got) != 1 || !uuid.MatchString(got[0]) {
		t.Errorf("x-request-id = %q, want a fresh UUID in place of the client's", got)
	}
	if _, ok := h["x-envoy-retry-on"]; ok {
		t.Error("x-envoy-retry-on from an external client reached the filters")
	}
	if st.Client != netip.MustParseAddr("192.0.2.62") {
		t.Errorf("client = %v, want the peer", st.Client)
	}

	cr, err := c.CheckRequest(st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	http := cr.GetAttributes().GetRequest().GetHttp()
	if http.GetId() == "" || http.GetId() == "client-chosen" {
		t.Errorf("CheckRequest id = %q, want the stream id", http.GetId())
	}
	if http.GetProtocol() != "HTTP/1.1" || http.GetScheme() != "http" {
		t.Errorf("protocol %q scheme %q, want HTTP/1.1 and http", http.GetProtocol(), http.GetScheme())
	}
	if hs := http.GetHeaders(); len(hs) != 2 || hs["x-origin"] != "web" || hs["x-request-id"] != h["x-request-id"][0] {
		t.Errorf("CheckRequest headers = %v, want x-origin and Envoy's x-request-id only (allowed_headers)", hs)
	}

	// The service answers the derived request as it should.
	s := sharedService(t)
	if got := checkCode(t, s.checkRaw(t, cr)); got != 200 {
		t.Errorf("Check = %d, want 200", got)
	}
	// The lease id of the concurrency route is the id Envoy generated, in the acquire and in
	// the release alike.
	dst, err := c.Accept(req("GET", "/downloads/f.bin", "192.0.2.62", "x-origin", "web", "x-user-id", "cm-u"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Descriptors(dst)
	if err != nil || len(ds) != 2 {
		t.Fatalf("download descriptors %v, %v", ds, err)
	}
	id := dst.Request.Headers["x-request-id"][0]
	for name, rr := range map[string][]string{"acquire": entryValues(ds[0].Proto().GetEntries(), "lease_id"),
		"release": entryValues(ds[1].Proto().GetEntries(), "lease_id")} {
		if len(rr) != 1 || rr[0] != id || !uuid.MatchString(id) {
			t.Errorf("%s lease_id = %q, want Envoy's x-request-id %q", name, rr, id)
		}
	}
}

// setExtAuthz puts f back as the ext_authz filter of c's first connection manager.
func setExtAuthz(c *envoysim.Config, f *extauthzv3.ExtAuthz) error {
	for _, hf := range c.Managers[0].GetHttpFilters() {
		if hf.GetTypedConfig().MessageIs(f) {
			a, err := anypb.New(f)
			if err != nil {
				return err
			}
			hf.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}
			return nil
		}
	}
	return fmt.Errorf("no ext_authz filter")
}

// entryValues returns the values of key among es.
func entryValues(es []*ratelimitcommonv3.RateLimitDescriptor_Entry, key string) []string {
	var out []string
	for _, e := range es {
		if e.GetKey() == key {
			out = append(out, e.GetValue())
		}
	}
	return out
}

// TestLostReleaseHoldsUntilLease: Envoy does not send the stream-done release when the
// downstream resets while the rate-limit call is in flight, and never retries a release that
// fails. Such a lost release costs the slot until the rule's lease ends: refused before, free
// after.
func TestLostReleaseHoldsUntilLease(t *testing.T) {
	const lease = 1500 * time.Millisecond
	s := newService(t, []byte(`
authority:
  - {resource: "GET:/downloads", strategy: white, origins: [web]}
param_flow:
  - {resource: "GET:/downloads", param: user, grade: concurrency, count: 1, lease: 1500ms}
`))
	dl := func(n int) envoysim.Request {
		r := req("GET", "/downloads/f.bin", "192.0.2.63", "x-origin", "web", "x-user-id", "lost-u")
		r.Headers["x-request-id"] = []string{"lost-" + strconv.Itoa(n)} // one stream per n
		return r
	}
	start := time.Now()
	if !s.allowed(t, dl(1)) {
		t.Fatal("the first download is refused")
	}
	// Its release is lost: never sent. The slot stays taken.
	if s.allowed(t, dl(2)) {
		t.Fatal("a second download is admitted while the first holds the only slot")
	}
	n := 3
	if !eventually(lease+3*time.Second, func() bool { n++; return s.allowed(t, dl(n)) }) {
		t.Fatalf("the slot was not freed %v after the lease of %v", time.Since(start), lease)
	}
	if held := time.Since(start); held < lease-100*time.Millisecond {
		t.Errorf("the slot was freed after %v, before the lease of %v ended", held, lease)
	}
	// dl(n) holds the slot now; with its release sent, the slot frees at once.
	if s.allowed(t, dl(100)) {
		t.Fatal("admitted while dl(n) holds the slot")
	}
	if got := s.limit(t, limitRequest(t, dl(n), true)).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("release: %v", got)
	}
	if !s.allowed(t, dl(101)) {
		t.Error("refused right after the holder's release")
	}
}

// TestRepeatedHeadersAndSplitCookies: Envoy joins a repeated header's values with "," in the
// CheckRequest's headers (CheckRequestUtils::setHttpRequest), or sends one header_map entry
// each under encode_raw_headers; a cookie sent in several cookie headers is one cookie list to
// the service either way, and a repeated header split on "," yields every value.
func TestRepeatedHeadersAndSplitCookies(t *testing.T) {
	client := startWith(t, `
authz:
  origin: [{from: cookie, name: sid}]
  params:
    tag: {from: header, name: x-tag, split: ","}
`, `
authority:
  - {resource: "GET:/items", strategy: white, origins: [s1]}
param_flow:
  - {resource: "GET:/items", param: tag, grade: qps, count: 1, duration: 1h}
`)
	for _, raw := range []bool{false, true} {
		t.Run(fmt.Sprintf("encode_raw_headers=%v", raw), func(t *testing.T) {
			c, err := envoysim.Load(envoyYAML)
			if err != nil {
				t.Fatal(err)
			}
			authz, _, err := c.Filters()
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range []string{"cookie", "x-tag"} {
				authz.AllowedHeaders.Patterns = append(authz.AllowedHeaders.Patterns,
					&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: h}})
			}
			authz.EncodeRawHeaders = raw
			if err := setExtAuthz(c, authz); err != nil {
				t.Fatal(err)
			}
			check := func(kv ...string) (int, string) {
				t.Helper()
				st, err := c.Accept(req("GET", "/items?item_id=rh", "192.0.2.64", kv...))
				if err != nil {
					t.Fatal(err)
				}
				cr, err := c.CheckRequest(st, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if !raw {
					if got := cr.GetAttributes().GetRequest().GetHttp().GetHeaders()["cookie"]; kv[1] == "a=1" && got != "a=1,sid=s1; b=2" {
						t.Errorf("cookie in the CheckRequest = %q, want the two headers joined with \",\"", got)
					}
				}
				resp, err := client.Check(context.Background(), cr)
				if err != nil {
					t.Fatal(err)
				}
				return checkCode(t, resp), resp.GetDeniedResponse().GetBody()
			}
			tag := "t-" + strconv.FormatBool(raw)
			if got, body := check("cookie", "a=1", "cookie", "sid=s1; b=2", "x-tag", tag+"a", "x-tag", tag+"b"); got != 200 {
				t.Fatalf("split cookies and a repeated header: Check = %d, want 200 (%s)", got, body)
			}
			// Both values of the repeated header were counted: each is used up now.
			for _, v := range []string{tag + "a", tag + "b"} {
				if got, _ := check("cookie", "sid=s1", "x-tag", v); got != 429 {
					t.Errorf("x-tag %s again: Check = %d, want 429", v, got)
				}
			}
		})
	}
}

// TestEnvoyReplies: the service's answers to derived requests, turned into what the client gets
// as Envoy's filters do (envoysim.RateLimitReply, CheckReply): statuses, bodies and header
// values.
func TestEnvoyReplies(t *testing.T) {
	s := sharedService(t)
	r := itemReq("replies-1")
	ds, err := envoy.Descriptors(accept(t, r))
	if err != nil {
		t.Fatal(err)
	}
	limit := regexp.MustCompile(`^([0-9]+), ([0-9]+);w=1(;name="[^"]*")?$`)
	var last envoysim.Reply
	admitted := 0
	start := time.Now()
	for i := 0; i < 20; i++ {
		reply, err := envoy.RateLimitReply(ds, s.limit(t, limitRequest(t, r, false)))
		if err != nil {
			t.Fatal(err)
		}
		last = reply
		if reply.Status != 0 {
			break
		}
		admitted++
		h := reply.ClientHeaders
		if m := limit.FindStringSubmatch(first(h, "x-ratelimit-limit")); m == nil || m[1] != m[2] {
			t.Errorf("allowed: x-ratelimit-limit %q, want \"N, N;w=1[;name=...]\"", first(h, "x-ratelimit-limit"))
		}
		if _, err := strconv.Atoi(first(h, "x-ratelimit-remaining")); err != nil {
			t.Errorf("allowed: x-ratelimit-remaining %q", first(h, "x-ratelimit-remaining"))
		}
	}
	// 7 at once (5 a second, a burst of 2), and 5 a second more however slow the calls are.
	if allowance := 7 + int(5*time.Since(start).Seconds()) + 1; last.Status != 429 || admitted < 1 || admitted > allowance {
		t.Fatalf("%d admitted, then status %d; want 1..%d then 429", admitted, last.Status, allowance)
	}
	h := last.ClientHeaders
	for name, want := range map[string]string{"x-ratelimit-remaining": "0", "x-envoy-ratelimited": "true", "content-type": "application/json"} {
		if got := first(h, name); got != want {
			t.Errorf("429: %s = %q, want %q", name, got, want)
		}
	}
	// Reset is the time until the bucket is full again, rounded up (README "The x-ratelimit
	// headers a client reads"). The bucket holds 7 (5 a second, a burst of 2); refused, it has
	// less than 1 token left, so it is full again after more than (7-1)/5 = 1.2s and at most
	// 7/5 = 1.4s: 2 whole seconds.
	if reset, err := strconv.Atoi(first(h, "x-ratelimit-reset")); err != nil || reset != 2 {
		t.Errorf("429: x-ratelimit-reset %q, want 2 (1.2s..1.4s until full, rounded up)", first(h, "x-ratelimit-reset"))
	}
	if ra, err := strconv.Atoi(first(h, "retry-after")); err != nil || ra < 1 {
		t.Errorf("429: retry-after %q, want whole seconds >= 1", first(h, "retry-after"))
	}
	var b blockBody
	if err := json.Unmarshal([]byte(last.Body), &b); err != nil || b.Blocked != "param_flow" || b.Param != "item_id" || b.Value != "replies-1" {
		t.Errorf("429 body %q", last.Body)
	}

	// ext_authz: a denial is the client's answer.
	reply, err := envoy.CheckReply(s.check(t, req("GET", "/items?item_id=replies-2", "192.0.2.65", "x-origin", "stranger")))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(reply.Body), &b); reply.Status != 403 || err != nil || b.Blocked != "authority" || b.Origin != "stranger" {
		t.Errorf("denied Check: status %d body %q", reply.Status, reply.Body)
	}
	reply, err = envoy.CheckReply(s.check(t, req("GET", "/items?item_id=replies-2", "192.0.2.65", "x-origin", "web")))
	if err != nil || reply.Status != 0 {
		t.Errorf("allowed Check: %+v, %v", reply, err)
	}
}

// first is the first value of name in h, or "".
func first(h map[string][]string, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
