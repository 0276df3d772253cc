package envoy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestActiveOverflow: the extauthz cluster's max_requests shared by both filters' calls. Over
// it a call fails at once: the ratelimit filter fails open (the request goes on, unlimited),
// ext_authz fails closed (status_on_error 503), and Envoy counts upstream_rq_active_overflow,
// which it exports to Prometheus as envoy_cluster_upstream_rq_active_overflow (the metric
// deploy/monitoring/envoy-alerts.yaml alerts on). Variant: the cluster's max_requests is 1,
// and the items route disables ext_authz, so that one held rate-limit call fills the cluster.
func TestActiveOverflow(t *testing.T) {
	bootstrap := variant(t, func(root map[string]any) {
		for _, c := range obj(root["static_resources"])["clusters"].([]any) {
			if obj(c)["name"] == "extauthz" {
				th := obj(obj(obj(c)["circuit_breakers"])["thresholds"].([]any)[0])
				th["max_requests"] = 1
			}
		}
		per := obj(route(root, "items")["typed_per_filter_config"])
		per["envoy.filters.http.ext_authz"] = map[string]any{
			"@type":    "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
			"disabled": true,
		}
	})
	s, rec := newRecordedStack(t, bootstrap)
	release := make(chan struct{})
	var calls atomic.Int32
	rec.answer(func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		if calls.Add(1) == 1 {
			<-release // the first call holds the cluster's one request
		}
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	})
	held := make(chan answer, 1)
	go func() { held <- s.do(h1, "GET", "/items?item_id=held") }()
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first rate-limit call never arrived")
		}
		time.Sleep(5 * time.Millisecond)
	}

	a := s.do(h2, "GET", "/items?item_id=over", seqHeader, "over")
	if a.status != http.StatusOK || len(s.reached("over")) != 1 {
		t.Errorf("a rate-limit call over max_requests: the client got %d %q, want 200 (failure_mode_deny false)", a.status, a.body)
	}
	a = s.do(h2, "GET", "/reports", seqHeader, "check-over")
	if a.status != http.StatusServiceUnavailable || len(s.reached("check-over")) != 0 {
		t.Errorf("a Check over max_requests: the client got %d %q, want 503 (fail closed, status_on_error)", a.status, a.body)
	}
	close(release)
	if a := <-held; a.status != http.StatusOK {
		t.Errorf("the held request: %d %q", a.status, a.body)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the recorder saw %d rate-limit calls, want 1 (the other overflowed in Envoy)", n)
	}

	st := s.envoy.Stats(t)
	if got := st["cluster.extauthz.upstream_rq_active_overflow"]; got != 2 {
		t.Errorf("cluster.extauthz.upstream_rq_active_overflow = %d, want 2", got)
	}
	if got := st["cluster.extauthz.upstream_rq_pending_overflow"]; got != 0 {
		t.Errorf("cluster.extauthz.upstream_rq_pending_overflow = %d, want 0 (Envoy 1.38 counts these as active overflow)", got)
	}
	if got := st["cluster.upstream.ratelimit.extauthz_rl.error"]; got != 1 {
		t.Errorf("ratelimit error = %d, want 1", got)
	}
	if got := st["http.ingress.ext_authz.extauthz.error"]; got != 1 {
		t.Errorf("ext_authz error = %d, want 1", got)
	}
	if got := promSample(t, s.envoy.AdminURL, `envoy_cluster_upstream_rq_active_overflow{envoy_cluster_name="extauthz"}`); got != "2" {
		t.Errorf("Prometheus sample of the overflow: %q, want 2", got)
	}
}

// promSample is the value of series in Envoy's /stats/prometheus, "" when it is not there.
func promSample(t *testing.T, admin, series string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "GET", admin+"/stats/prometheus", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
