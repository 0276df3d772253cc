package conformance

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// unenforcedMsg is the warning the service logs for a concurrency rule that only Check calls
// reach.
const unenforcedMsg = "a concurrency rule limits nothing: its resource sees ext_authz Check calls and no rate-limit call, and Check has no completion signal; send the resource's requests through Envoy's rate-limit filter too (with the lease key), or make the rule a qps rule"

// TestConcurrencyUnenforcedWarning: through the built binary, a thread-count rule imported from
// Sentinel whose resource sees Check calls and no rate-limit call for a minute is logged once,
// naming the rule, and counted in extauthz_concurrency_unenforced_total; the QPS rule beside it
// is not. It waits for the minute on the wall clock (about 65 s), beside the other tests.
func TestConcurrencyUnenforcedWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("waits a minute of wall-clock time; skipped under -short")
	}
	t.Parallel()
	bin := binary.Path(t)
	path := filepath.Join(t.TempDir(), "rules.json")
	doc := `[{"resource": "GET:/buy", "grade": 1, "paramIdx": 0, "count": 100},
		{"resource": "GET:/stream", "grade": 0, "paramIdx": 0, "count": 2}]`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, testbin.Options{
		Binary: bin,
		Args:   []string{"serve", "--rules", path, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		Env:    []string{"EXTAUTHZ_PARAM_NAMES=user"},
	})
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	authz := authv3.NewAuthorizationClient(conn)
	check := func(path string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: "GET", Path: path, Host: "example.com", Headers: map[string]string{"x-user": "u1"},
			}},
		}})
		if err != nil {
			t.Fatalf("Check %s: %v", path, err)
		}
	}
	logged := func() int { return strings.Count(p.LogText(), unenforcedMsg) }
	start := time.Now()
	for time.Since(start) < 55*time.Second {
		check("/stream")
		check("/buy")
		if n := logged(); n > 0 {
			t.Fatalf("warned after %v, before a minute of Check calls", time.Since(start))
		}
		time.Sleep(5 * time.Second)
	}
	deadline := time.Now().Add(30 * time.Second)
	for logged() == 0 && time.Now().Before(deadline) {
		check("/stream")
		check("/buy")
		time.Sleep(time.Second)
	}
	p.WaitLog(t, unenforcedMsg, time.Second)
	for range 3 {
		check("/stream")
	}
	e := p.Entry(unenforcedMsg)
	if e["rule"] != "param_flow[1]" || e["resource"] != "GET:/stream" {
		t.Errorf("warning %v, want it to name param_flow[1] on GET:/stream", e)
	}
	if n := logged(); n != 1 {
		t.Errorf("warned %d times, want once", n)
	}
	resp, err := http.Get("http://" + p.AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := series(string(body), "extauthz_concurrency_unenforced_total"); got != 1 {
		t.Errorf("extauthz_concurrency_unenforced_total = %v, want 1", got)
	}
}

// series is the value of a metric without labels in a Prometheus text exposition; -1 if absent.
func series(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return -1
}
