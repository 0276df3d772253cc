package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

const topologiesDoc = "../docs/topologies.md"

// docBlock returns the fenced block of docs/topologies.md whose first line is "# "+title.
func docBlock(t *testing.T, title string) string {
	t.Helper()
	doc, err := os.ReadFile(topologiesDoc)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(doc), "```yaml\n")
	for _, p := range parts[1:] {
		block, _, ok := strings.Cut(p, "```")
		if ok && strings.HasPrefix(block, "# "+title+"\n") {
			return block
		}
	}
	t.Fatalf("%s has no yaml block headed %q", topologiesDoc, "# "+title)
	return ""
}

// writeRecipe writes the config and rules blocks of a topology to a directory and returns
// their paths; replace pairs are applied to the config first (old, new, ...).
func writeRecipe(t *testing.T, topology string, replace ...string) (config, rules string) {
	t.Helper()
	dir := t.TempDir()
	cfg := docBlock(t, topology+": extauthz.yaml")
	cfg = strings.NewReplacer(replace...).Replace(cfg)
	config, rules = filepath.Join(dir, "extauthz.yaml"), filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rules, []byte(docBlock(t, topology+": rules.yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	return config, rules
}

func exportCall(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		rlDesc("resource", "POST:/exports", "user", user)}}
}

// TestTopologyOneReplicaInMemory: the one-replica recipe as written validates and admits its
// rule's count for one user, then refuses; another user has their own allowance.
func TestTopologyOneReplicaInMemory(t *testing.T) {
	config, rules := writeRecipe(t, "one replica")
	if out, ok := validateOut(t, config, rules); !ok || !strings.Contains(out, "ok: 0 authority rules, 1 param_flow rules") {
		t.Fatalf("validate of the recipe:\n%s", out)
	}
	s := startServiceWith(t, config, rules)
	var codes []rlsv3.RateLimitResponse_Code
	for range 7 {
		codes = append(codes, s.limit(t, exportCall("u1")).GetOverallCode())
	}
	for i, c := range codes {
		want := rlsv3.RateLimitResponse_OK
		if i >= 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if c != want {
			t.Errorf("call %d for u1: %v, want %v (count 5 an hour)", i+1, c, want)
		}
	}
	if got := s.limit(t, exportCall("u2")).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("first call for u2: %v, want OK", got)
	}
}

// TestTopologyThreeReplicasOnRedis: the three-replica recipe as written (its Redis address
// pointed at a real redis-server): three binaries share a cluster rule's count, twelve calls for
// one user spread over them admit exactly the six of the rule, in order; with Redis stopped,
// each replica logs the outage and admits its share, 6/3 = 2, for a new user: six in all, never
// above the rule.
//
// The test raises store.redis.timeout (EXTAUTHZ_STORE_REDIS_TIMEOUT) from the recipe's 5ms so
// that a machine shared with other tests never lets a slow round trip fall back, which would
// make the count inexact.
func TestTopologyThreeReplicasOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	config, rules := writeRecipe(t, "three replicas", `"redis:6379"`, `"`+srv.Addr()+`"`)
	cfg, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	for _, setting := range []string{"addrs:", "fallback: local", "replicas: 3"} {
		if !strings.Contains(string(cfg), setting) {
			t.Fatalf("the recipe's config does not set %q:\n%s", setting, cfg)
		}
	}
	if out, ok := validateOut(t, config, rules); !ok || !regexp.MustCompile(`cluster: true`).MatchString(out) {
		t.Fatalf("validate of the recipe:\n%s", out)
	}
	var replicas []*service
	for range 3 {
		replicas = append(replicas, startServiceWith(t, config, rules, "EXTAUTHZ_STORE_REDIS_TIMEOUT=500ms"))
	}

	admitted := 0
	for i := range 12 {
		got := replicas[i%3].limit(t, exportCall("u1")).GetOverallCode()
		want := rlsv3.RateLimitResponse_OK
		if i >= 6 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got != want {
			t.Errorf("call %d for u1 (replica %d): %v, want %v", i+1, i%3, got, want)
		}
		if got == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 6 {
		t.Errorf("the three replicas admitted %d calls for u1, want 6 (the cluster rule's count)", admitted)
	}

	srv.Kill()
	total := 0
	for r, s := range replicas {
		n := 0
		for range 4 {
			if s.limit(t, exportCall("u2")).GetOverallCode() == rlsv3.RateLimitResponse_OK {
				n++
			}
		}
		if n != 2 {
			t.Errorf("replica %d with Redis stopped admitted %d calls for u2, want its share 2 (6 / 3)", r, n)
		}
		total += n
		s.proc.WaitLog(t, "redis unavailable: breaker open", 10*time.Second)
	}
	if total > 6 {
		t.Errorf("the fleet admitted %d calls for u2 during the outage, more than the rule's 6", total)
	}
}

// TestTopologiesDocNamesRealFiles: every repository path docs/topologies.md names exists, so the
// Istio and Envoy Gateway recipes point at the manifests deploy/'s tests decode.
func TestTopologiesDocNamesRealFiles(t *testing.T) {
	doc, err := os.ReadFile(topologiesDoc)
	if err != nil {
		t.Fatal(err)
	}
	paths := regexp.MustCompile("`((?:deploy|envoy-config|docs|e2e)/[A-Za-z0-9_./-]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(paths) < 8 {
		t.Fatalf("only %d repository paths named in %s", len(paths), topologiesDoc)
	}
	for _, m := range paths {
		if _, err := os.Stat(filepath.Join(moduleRoot, m[1])); err != nil {
			t.Errorf("%s names %s: %v", topologiesDoc, m[1], err)
		}
	}
}
